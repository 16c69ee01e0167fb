"""Result tables for ``spotproof smoke --batch``: a SQLite file, or a real PostgreSQL.

PostgreSQL runs from the server binaries on the machine (Debian's ``postgresql`` package:
``initdb`` and ``postgres`` on PATH or under ``/usr/lib/postgresql/*/bin``), in a
throwaway data directory, on a free loopback port, with trust authentication for one
role. ``initdb`` refuses to run as root, so as root the server runs as the ``postgres``
user (``runuser``), as the package's own scripts do.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from spotproof.smoke.emulation.object_stores import EmulatorError, free_port, running

TABLE_KINDS = ("sqlite", "postgres", "none")
ROLE = "spotproof"


def _server_binary(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise EmulatorError(
            f"a PostgreSQL result table needs the server's {name} "
            "(Debian: apt-get install postgresql)"
        )
    return found


@contextlib.contextmanager
def local_postgres() -> Iterator[str]:
    """A PostgreSQL server for the duration; yields its ``postgresql://`` URL."""
    initdb, postgres = _server_binary("initdb"), _server_binary("postgres")
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    with tempfile.TemporaryDirectory(prefix="spotproof-pg-") as scratch:
        data = Path(scratch, "data")
        if as_owner:
            shutil.chown(scratch, "postgres")
        done = subprocess.run(
            [*as_owner, initdb, "-D", str(data), "-U", ROLE, "--auth=trust", "--no-sync"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise EmulatorError(f"initdb failed: {done.stderr.strip()[-300:]}")
        port = free_port()
        command = [
            *as_owner,
            postgres,
            "-D",
            str(data),
            "-p",
            str(port),
            "-k",
            scratch,
            "-c",
            "listen_addresses=127.0.0.1",
        ]
        with running(command, port, "PostgreSQL"):
            _until_ready(port)
            yield f"postgresql://{ROLE}@127.0.0.1:{port}/postgres"


READY_SECONDS = 60


def _until_ready(port: int) -> None:
    """Wait until the server takes connections. It listens before it has finished starting
    and refuses connections until then ("the database system is starting up"), which
    ``pg_isready`` tells apart: exit 0 accepting, 1 rejecting, 2 no answer
    (https://www.postgresql.org/docs/current/app-pg-isready.html)."""
    ready = _server_binary("pg_isready")
    deadline = time.monotonic() + READY_SECONDS
    while True:
        done = subprocess.run(
            [ready, "-q", "-h", "127.0.0.1", "-p", str(port), "-U", ROLE, "-d", "postgres"],
            check=False,
        )
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise EmulatorError(f"PostgreSQL on port {port} not ready in {READY_SECONDS} s")
        time.sleep(0.1)


@contextlib.contextmanager
def result_table(kind: str, scratch: str) -> Iterator[str | None]:
    """The URL of a fresh result table of ``kind`` (one of ``TABLE_KINDS``)."""
    if kind == "none":
        yield None
    elif kind == "sqlite":
        yield f"sqlite:///{Path(scratch, 'results.db')}"
    elif kind == "postgres":
        with local_postgres() as url:
            yield url
    else:
        raise ValueError(f"result table {kind!r}; allowed: {', '.join(TABLE_KINDS)}")
