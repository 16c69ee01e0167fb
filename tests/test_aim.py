"""The rehearsal's aimed kill against an object store: a gate holds the commit of the
first checkpoint at or after a step, a real writer process is killed while it waits, and
the bucket is left with that step's whole payload and no manifest."""

from __future__ import annotations

import signal
import sys
import uuid
from collections.abc import Iterator

import pytest

from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.layout import step_prefix
from spotproof.runtime.storage import open_store
from spotproof.smoke.emulation.object_stores import Bucket, environment
from spotproof.smoke.processes.aimed_kill import ManifestGate, gated
from spotproof.smoke.processes.trainer_process import TrainerProcess

pytestmark = pytest.mark.processes

WRITER = """
import json, sys
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
store = CheckpointStore(sys.argv[1], part_bytes=16 * 1024)
for step in map(int, sys.argv[2:]):
    store.save(step, {"state": bytes([step]) * 100_000})
    print(json.dumps({"event": "committed", "step": step}), flush=True)
"""
"""A process that saves the given steps in turn, each of several parts, and says so."""


@pytest.fixture(params=["s3", "gcs", "azure"])
def gate(
    request: pytest.FixtureRequest, emulators: dict[str, Bucket]
) -> Iterator[tuple[ManifestGate, Bucket]]:
    shared = emulators[request.param]
    bucket = Bucket(shared.store, shared.prefix(f"aim-{uuid.uuid4().hex[:12]}"), shared.env)
    with gated(bucket) as gate:
        assert gate is not None
        yield gate, bucket


def _writer(gate: ManifestGate, bucket: Bucket, *steps: int) -> TrainerProcess:
    argv = [sys.executable, "-c", WRITER, bucket.url, *map(str, steps)]
    return TrainerProcess(gate.route(bucket.env), origin=0.0, argv=argv)


def _committed(bucket: Bucket) -> list[int]:
    with environment(bucket.env):
        return CheckpointStore(bucket.url).committed_steps()


def _payload(bucket: Bucket, step: int) -> list[str]:
    with environment(bucket.env):
        return open_store(bucket.url).list(step_prefix(step))


def test_a_killed_writer_leaves_the_held_steps_payload_and_no_commit(
    gate: tuple[ManifestGate, Bucket],
) -> None:
    relay, bucket = gate
    relay.arm(from_step=5)
    writer = _writer(relay, bucket, 4, 10, 11)

    held = relay.held(writer, timeout=60)
    writer.send(signal.SIGKILL)
    writer.finish(timeout=30)

    assert held == 10
    assert [e["step"] for e in writer.of("committed")] == [4]
    assert _committed(bucket) == [4]
    assert _payload(bucket, 10)


def test_a_disarmed_gate_passes_every_commit(gate: tuple[ManifestGate, Bucket]) -> None:
    relay, bucket = gate
    relay.arm(from_step=5)
    relay.disarm()
    writer = _writer(relay, bucket, 4, 10)

    assert writer.finish(timeout=60) == 0, writer.stderr[-3:]
    assert relay.held(writer, timeout=1) is None
    assert _committed(bucket) == [4, 10]


def test_the_file_store_has_no_gate() -> None:
    with gated(Bucket("file", "file:///tmp/none")) as gate:
        assert gate is None


def test_a_gate_on_a_writer_that_ends_uncaught_says_so(emulators: dict[str, Bucket]) -> None:
    shared = emulators["s3"]
    bucket = Bucket("s3", shared.prefix(f"aim-{uuid.uuid4().hex[:12]}"), shared.env)
    with gated(bucket) as relay:
        assert relay is not None
        relay.arm(from_step=50)
        writer = _writer(relay, bucket, 4)

        assert relay.held(writer, timeout=60) is None
        assert writer.finish(timeout=30) == 0, writer.stderr[-3:]
        assert _committed(bucket) == [4]
