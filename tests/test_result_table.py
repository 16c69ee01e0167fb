"""Results UPSERTed into SQL (``spotproof.runtime.batch.table``): SQLite files and a real
PostgreSQL server, one row per item, the same statement on both."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotproof.runtime.batch.table import (
    ResultTable,
    TableUnavailable,
    TableURLError,
    open_table,
)
from spotproof.smoke.emulation.databases import local_postgres
from spotproof.smoke.emulation.object_stores import free_port

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with local_postgres() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ResultTable]:
    if request.param == "sqlite":
        opened = open_table(f"sqlite:///{tmp_path / 'results.db'}")
    else:
        name = f"results_{request.node.name.split('[')[0][-40:].lower()}"
        opened = open_table(request.getfixturevalue("postgres_url"), table=name)
    yield opened
    opened.close()


def test_an_upserted_result_is_one_row_keyed_by_the_item_id(table: ResultTable) -> None:
    table.upsert("item-1", b"\x00result one")
    table.upsert("item-2", b"result two")
    assert table.rows() == {"item-1": b"\x00result one", "item-2": b"result two"}


def test_writing_an_items_row_again_replaces_it_and_adds_none(table: ResultTable) -> None:
    table.upsert("item-1", b"first")
    table.upsert("item-1", b"second")
    assert table.rows() == {"item-1": b"second"}


def test_a_row_is_committed_before_upsert_returns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'results.db'}"
    writer = open_table(url)
    writer.upsert("item-1", b"durable")
    reader = open_table(url)  # another connection, as another process would have
    assert reader.rows() == {"item-1": b"durable"}


@pytest.mark.parametrize(
    ("url", "table", "message"),
    [
        ("mysql://db/results", "spotproof_results", "allowed: sqlite:///PATH or postgresql://"),
        ("sqlite://", "spotproof_results", "allowed: sqlite:///PATH"),
        ("sqlite:///x.db", "results; DROP TABLE x", "allowed a lower-case identifier"),
        ("sqlite:///x.db", "Results", "allowed a lower-case identifier"),
    ],
)
def test_a_table_it_cannot_use_is_refused_naming_what_is_allowed(
    url: str, table: str, message: str
) -> None:
    with pytest.raises(TableURLError, match=message):
        open_table(url, table=table)


def test_a_database_that_refuses_the_connection_is_reported_in_one_line() -> None:
    with pytest.raises(TableUnavailable, match="result table") as raised:
        open_table(f"postgresql://nobody@127.0.0.1:{free_port()}/none")
    assert "\n" not in str(raised.value)


def test_workers_opening_a_new_table_at_once_all_succeed(postgres_url: str) -> None:
    # PostgreSQL's CREATE TABLE IF NOT EXISTS is not safe against itself: without a lock,
    # one of several sessions racing fails on the pg_type unique index (seen in CI).
    starting = threading.Barrier(8)
    errors: list[BaseException] = []

    def open_at_once(round_: int) -> None:
        starting.wait()
        try:
            open_table(postgres_url, table=f"raced_{round_}").close()
        except Exception as error:  # collected for the assertion below
            errors.append(error)

    for round_ in range(5):
        threads = [threading.Thread(target=open_at_once, args=(round_,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        starting.reset()
    assert errors == []
