"""Aiming a hard kill at the moment between a checkpoint's payload and its commit.

A SIGKILL at a random time almost always lands while the trainer computes: uploads are a
small part of its time. To show that a kill inside an upload loses nothing committed and
leaves nothing loadable, the rehearsal lands one there on purpose, and must do so on a
loaded machine as surely as on an idle one:

- **Object stores** (the S3, GCS and Azure emulators, HTTP on loopback): the trainer talks
  to its bucket through a :class:`ManifestGate` (a ``smoke.emulation.fault_proxy`` relay)
  that passes every request on until it is armed, then holds back the first write of a manifest (the
  commit) at or after a given step and says so. The checkpoint protocol writes the
  manifest only once every payload part has been acknowledged, so at that moment the whole
  payload is in the bucket and its commit is not; the manifest never reaches the bucket,
  and the harness kills the trainer. Nothing here depends on timing: a slow machine only
  makes the trainer wait longer at the gate.
- **The file store** has no wire to stand on: :func:`freeze_inside_an_upload` runs the
  trainer in short slices (SIGCONT, SIGSTOP) and looks at the directory while it is
  stopped. Local listings take microseconds, so the slices are short enough to land inside
  a multi-part upload.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator

from spotproof.runtime.checkpointer.layout import (
    MANIFESTS,
    STEP_NAME,
    STEPS,
    manifest_key,
    payload_step,
    step_prefix,
)
from spotproof.runtime.storage import ObjectStore
from spotproof.smoke.emulation.fault_proxy import (
    Fault,
    FaultProxy,
    emulator_port,
    fault_proxy,
    through,
)
from spotproof.smoke.emulation.object_stores import Bucket
from spotproof.smoke.processes.trainer_process import TrainerProcess

_MANIFEST_WRITE = ("PUT|POST", rf"{MANIFESTS}(?:/|%2F)({STEP_NAME.pattern})\.json")
"""A manifest's write: its key is in the request's path (S3, Azure) or, URL-encoded or
not, in a GCS multipart upload's metadata."""


class ManifestGate:
    """The relay between a run's trainers and its bucket's emulator, which can hold back
    a commit: every request passes until :meth:`arm`, and the first manifest write of a
    step at or after the armed one after it. A batch delete names manifests too, but only
    of steps older than the newest commit, which the gate has held by then."""

    def __init__(self, proxy: FaultProxy, store: str) -> None:
        self.proxy, self.store = proxy, store
        self._commit: Fault | None = None

    def route(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the emulator's endpoint pointed at the gate."""
        return through(self.store, env, self.proxy)

    def arm(self, from_step: int) -> None:
        """Hold back the first manifest write of a step at or after ``from_step``."""
        self.proxy.clear()
        method, target = _MANIFEST_WRITE
        self._commit = self.proxy.add(
            Fault(method, target, "hold", times=1, accept=lambda found: int(found[1]) >= from_step)
        )

    def disarm(self) -> None:
        """Pass everything on again. A write held stays held until its client goes, and
        never reaches the bucket."""
        self.proxy.clear()
        self._commit = None

    def held(self, process: TrainerProcess, timeout: float) -> int | None:
        """The step whose commit is held, once one is; None if ``process`` ends (or
        ``timeout`` passes) first, or the gate is not armed."""
        deadline = time.monotonic() + timeout
        commit = self._commit
        while commit is not None and not commit.hit.wait(0.05):
            if process.popen.poll() is not None or time.monotonic() > deadline:
                return None
        return int(commit.last[1]) if commit is not None and commit.last else None


@contextlib.contextmanager
def gated(bucket: Bucket) -> Iterator[ManifestGate | None]:
    """A gate in front of ``bucket``'s emulator for as long as the block runs; None for the
    file store, which has no wire to stand on."""
    if bucket.store == "file":
        yield None
        return
    with fault_proxy(emulator_port(bucket.store, bucket.env)) as proxy:
        yield ManifestGate(proxy, bucket.store)


AIM_SLICE_SECONDS = 0.002
"""How long the aimed trainer runs between two looks while no upload of it is in flight;
once one is, it is only let run for the moment between SIGCONT and SIGSTOP."""
SETTLE_SECONDS = 0.02
"""Time for files the trainer was writing when it was stopped to show in a listing."""


def freeze_inside_an_upload(
    observer: ObjectStore, process: TrainerProcess, writer: str, timeout: float = 120
) -> int | None:
    """Run the trainer in slices and look at the store while it is stopped, until its
    newest upload has payload and no manifest; return that step with the trainer stopped,
    or None if it ended (or ``timeout`` passed) first.

    The store, not the trainer's "saving" events, says which upload is newest: under load
    the events are read late, after the upload they announce has committed."""
    committed: set[int] = set()
    deadline = time.monotonic() + timeout
    while process.popen.poll() is None and time.monotonic() < deadline:
        process.send(signal.SIGSTOP)
        step = max(_payload_steps(observer), default=None)
        in_flight = step is not None and step not in committed
        if in_flight and observer.exists(manifest_key(step)):
            committed.add(step)
            in_flight = False
        if in_flight and observer.list(f"{step_prefix(step)}/{writer}"):
            time.sleep(SETTLE_SECONDS)
            if not observer.exists(manifest_key(step)):
                return step
            committed.add(step)
            in_flight = False
        process.send(signal.SIGCONT)
        if not in_flight:
            time.sleep(AIM_SLICE_SECONDS)
    return None


def _payload_steps(observer: ObjectStore) -> Iterator[int]:
    for name in observer.list(STEPS):
        step = payload_step(name)
        if step is not None:
            yield step
