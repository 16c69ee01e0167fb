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
from collections.abc import Iterator
from pathlib import Path

from spotproof.smoke.emulators import EmulatorError, free_port, running

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
            yield f"postgresql://{ROLE}@127.0.0.1:{port}/postgres"


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
