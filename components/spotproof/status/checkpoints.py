"""The last committed checkpoint at a store, and when it was committed.

Read with the runtime's own reader: a step is committed when its manifest exists
(``CheckpointStore.committed_steps``; payload without a manifest never counts), and the
commit time is the manifest's ``created`` field, which the committing writer stamps at
commit (``runtime.checkpointer.manifest``, formats 3 and 4; ``read_commit`` refuses a
malformed one). An object's modification time would be the store's and would change with
a copy; ``created`` is part of the commit itself.

The stack's ``checkpoint_url`` output is the smoke Job's parent prefix: each smoke run
writes under ``<checkpoint_url>/run-<digest>`` (``kube.smoke.run_prefix``), so where no
step is committed at the URL itself, the newest commit of its ``run-*`` prefixes is shown.
A store this machine cannot read is reported, not fatal: the cluster was read. The store is
opened to read (``open_store(url, create=False)``): a ``file://`` URL a Job names creates no
directory on this machine, and a directory that is missing has nothing committed.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.layout import manifest_key
from spotproof.runtime.checkpointer.manifest import (
    MAX_MANIFEST_BYTES,
    ManifestError,
    read_commit,
)
from spotproof.runtime.messages import first_line, redacted
from spotproof.runtime.storage import StorageError, open_store
from spotproof.runtime.storage.errors import Unreadable

RUN_PREFIX = "run-"
"""How ``kube.smoke.run_prefix`` names each smoke run's folder."""


@dataclass(frozen=True)
class LastCheckpoint:
    url: str
    """Where the step was found (a ``run-*`` prefix of the URL asked, for the smoke Job)."""
    step: int | None = None
    """None when nothing is committed there, or the store could not be read (``error``)."""
    committed_at: float | None = None
    age_seconds: float | None = None
    error: str = ""


def _newest(url: str) -> tuple[int, float] | None:
    store = CheckpointStore(url, store=open_store(url, create=False))
    steps = store.committed_steps()
    if not steps:
        return None
    commit = read_commit(store.store.get(manifest_key(steps[-1]), limit=MAX_MANIFEST_BYTES))
    return steps[-1], commit.created


def last_committed(url: str, now: float) -> LastCheckpoint:
    """The newest committed step under ``url`` (or its newest ``run-*`` prefix), its commit
    time and its age at ``now``."""
    try:
        found = _newest(url)
        where = url
        if found is None:
            runs = [
                name.rsplit("/", 1)[-1]
                for name in open_store(url, create=False).list("")
                if name.rsplit("/", 1)[-1].startswith(RUN_PREFIX)
            ]
            newest = [
                (f, f"{url.rstrip('/')}/{run}")
                for run in runs
                if (f := _newest(f"{url.rstrip('/')}/{run}"))
            ]
            if newest:
                found, where = max(newest, key=lambda pair: pair[0][1])
    except (StorageError, ManifestError, Unreadable, FileNotFoundError, ImportError) as error:
        return LastCheckpoint(redacted(url), error=first_line(error))
    if found is None:
        return LastCheckpoint(redacted(url))
    step, created = found
    return LastCheckpoint(redacted(where), step, created, max(0.0, now - created))
