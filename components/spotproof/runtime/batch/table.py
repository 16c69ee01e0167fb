"""Results mirrored into a SQL table, one row per item, by UPSERT.

The object store stays the source of truth: a result is first stored there create-only
(``results``), and the row is written after it with the *stored* bytes, so a duplicate
computation that lost the race writes the winner's result, never its own. The worker
acknowledges an item only once its row is committed too; a worker killed between the two
leaves the item to a redelivery, which finds the object and writes the row. The statement
is the same on both databases (``INSERT ... ON CONFLICT (item_id) DO UPDATE``, SQLite
3.24+ and PostgreSQL 9.5+), so writing a row twice is harmless.

- ``sqlite:///PATH`` (the default kind; ``sqlite:////abs/path.db`` is absolute): the
  standard library's ``sqlite3``, a 30 s busy timeout for workers sharing the file. Each
  commit is durable with SQLite's default ``synchronous=FULL``
  (https://www.sqlite.org/pragma.html#pragma_synchronous).
- ``postgresql://USER@HOST:PORT/DB`` (also ``postgres://``): psycopg 3 (the ``batch-sql``
  extra). A commit returns once its WAL is flushed with the default
  ``synchronous_commit = on``
  (https://www.postgresql.org/docs/current/runtime-config-wal.html).

Why no SQLAlchemy: the whole use is one ``CREATE TABLE`` and one ``INSERT``, identical in
both dialects but for the placeholder and the blob type; an ORM would add a dependency
and hide the durability each driver gives.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from spotproof.runtime.messages import first_line, redacted

DEFAULT_TABLE = "spotproof_results"
TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
"""Lower-case SQL identifiers up to PostgreSQL's 63 bytes: safe unquoted in both."""
ALLOWED = "sqlite:///PATH or postgresql://USER@HOST[:PORT]/DATABASE"


class _Redacted:
    """A message with the URL's credentials taken out (``runtime.messages``)."""

    def __init__(self, message: str) -> None:
        super().__init__(redacted(message))  # type: ignore[call-arg]


class TableURLError(_Redacted, ValueError):
    """A table URL or name this module cannot use; the message names what is allowed."""


class TableUnavailable(_Redacted, RuntimeError):
    """The database did not accept the connection (down, refused, bad credentials)."""


@dataclass(frozen=True)
class _Dialect:
    placeholder: str
    blob: str
    create_lock: str | None
    """Taken in the ``CREATE TABLE`` transaction so that workers starting together create
    the table once. PostgreSQL's ``IF NOT EXISTS`` checks the catalog before inserting, so
    two sessions racing both try, and one fails on the ``pg_type`` unique index ("Key
    (typname, typnamespace) ... already exists"): a transaction-scoped advisory lock
    serializes them (https://www.postgresql.org/docs/current/explicit-locking.html#ADVISORY-LOCKS).
    SQLite's writer lock already does."""


SQLITE = _Dialect("?", "BLOB", create_lock=None)
POSTGRESQL = _Dialect("%s", "BYTEA", create_lock="SELECT pg_advisory_xact_lock(%s)")


class ResultTable:
    """``upsert(item_id, result)``: the item's row, committed before it returns."""

    def __init__(self, connection: Any, dialect: _Dialect, table: str) -> None:
        self.connection, self.dialect, self.table = connection, dialect, table
        cursor = connection.cursor()
        if dialect.create_lock:
            cursor.execute(dialect.create_lock, (_lock_key(table),))
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {table} ("
            "item_id TEXT PRIMARY KEY, "
            f"result {dialect.blob} NOT NULL, "
            "sha256 TEXT NOT NULL, "
            "stored_at TEXT NOT NULL)"
        )
        connection.commit()

    def upsert(self, item_id: str, result: bytes) -> None:
        mark = self.dialect.placeholder
        self._execute(
            f"INSERT INTO {self.table} (item_id, result, sha256, stored_at) "
            f"VALUES ({mark}, {mark}, {mark}, {mark}) "
            "ON CONFLICT (item_id) DO UPDATE SET result = excluded.result, "
            "sha256 = excluded.sha256, stored_at = excluded.stored_at",
            (
                item_id,
                result,
                hashlib.sha256(result).hexdigest(),
                datetime.now(UTC).isoformat(timespec="milliseconds"),
            ),
        )

    def rows(self) -> dict[str, bytes]:
        """Every row's result by item id (for checks and small tables)."""
        cursor = self.connection.cursor()
        cursor.execute(f"SELECT item_id, result FROM {self.table}")
        return {item_id: bytes(result) for item_id, result in cursor.fetchall()}

    def close(self) -> None:
        self.connection.close()

    def _execute(self, statement: str, parameters: tuple[Any, ...] = ()) -> None:
        cursor = self.connection.cursor()
        cursor.execute(statement, parameters)
        self.connection.commit()


def _lock_key(table: str) -> int:
    """A signed 64-bit advisory-lock key, the same in every worker for one table."""
    return int.from_bytes(
        hashlib.sha256(f"spotproof:{table}".encode()).digest()[:8], "big", signed=True
    )


def open_table(url: str, table: str = DEFAULT_TABLE) -> ResultTable:
    """The result table at ``url``; :class:`TableURLError` for an unknown kind or a table
    name that is not a plain lower-case identifier."""
    if not TABLE_NAME.fullmatch(table):
        raise TableURLError(
            f"result table name {table!r}: allowed a lower-case identifier "
            "(letters, digits, _; 63 at most; not starting with a digit)"
        )
    parsed = urlparse(url)
    if parsed.scheme == "sqlite" and not parsed.netloc and parsed.path.strip("/"):
        # sqlite:///relative.db has path "/relative.db"; sqlite:////abs.db has "//abs.db".
        path = parsed.path[1:]
        try:
            connection = sqlite3.connect(path, timeout=30)
        except sqlite3.Error as error:
            raise TableURLError(f"result table {url!r}: {error}") from None
        return ResultTable(connection, SQLITE, table)
    if parsed.scheme in ("postgresql", "postgres") and parsed.path.strip("/"):
        try:
            import psycopg  # noqa: PLC0415
        except ImportError:
            raise TableURLError(
                f"result table {url!r}: PostgreSQL needs psycopg; install spotproof[batch-sql]"
            ) from None
        try:
            connection = psycopg.connect(url, connect_timeout=10)
        except psycopg.Error as error:
            raise TableUnavailable(f"result table {url!r}: {first_line(error)}") from None
        return ResultTable(connection, POSTGRESQL, table)
    raise TableURLError(f"result table URL {url!r} not supported; allowed: {ALLOWED}")
