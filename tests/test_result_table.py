"""Results UPSERTed into SQL (``spotproof.runtime.batch.table``): SQLite files and a real
PostgreSQL server, one row per item, the same statement on both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spotproof.runtime.batch.table import (
    ResultTable,
    TableUnavailable,
    TableURLError,
    open_table,
)
from spotproof.smoke.databases import local_postgres
from spotproof.smoke.emulators import free_port


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
