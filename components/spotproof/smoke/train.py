"""The smoke-test trainer: ``python -m spotproof.smoke.train``.

A deterministic PyTorch training loop whose whole state (model, optimizer, RNG, step; the
data position is the step, batches are generated from ``SEED`` and the step) goes into
each checkpoint, so a run interrupted any number of times ends with the same ``digest`` as
one that never was.

Configuration (environment), each variable defined in ``spotproof.runtime.settings`` with
its meaning, default and range: ``CHECKPOINT_URL``, ``CHECKPOINT_INTERVAL`` and
``TOTAL_STEPS`` (required), ``SEED``, ``MODEL_MB``, ``GRACE_SECONDS``, ``STEP_SECONDS``,
``KEEP_CHECKPOINTS``, ``CHECKPOINT_PART_KB``, ``EMIT_STEPS``, ``TRAIN_THREADS``,
``PEER_WAIT_SECONDS``, ``RENDEZVOUS_SECONDS``, ``STORAGE_STARTUP_SECONDS``, and for a gang
of ranks over torch.distributed (gloo), as torchrun and a JobSet set them,
``WORLD_SIZE`` (a divisor of the batch's 16 rows), ``RANK``, ``MASTER_ADDR`` and
``MASTER_PORT`` (``spotproof.smoke.distributed``). A variable missing, malformed, not
finite or out of its range stops the trainer before it starts, with exit 2 and one line
naming it.

SEED and MODEL_MB define the run: they are recorded in every checkpoint's manifest, and a
trainer pointed at a checkpoint of another run refuses to resume it (exit 2) rather than
continue someone else's weights.

Output: one JSON object per line on stdout (``resumed``, ``saving``, ``checkpoint``,
``preempted``, ``done``, ...). A ``checkpoint`` event is printed only once its step is
committed, with ``seconds`` (the save), ``blocked_seconds`` (training held up by it: the
wait for the previous upload plus ``capture_seconds``, the copy of the state) and, for
the final save, ``since_signal``. Exit codes: see ``spotproof.runtime.exit_codes``.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import torch

from spotproof.runtime import exit_codes, launcher, metrics, settings
from spotproof.runtime.checkpointer import in_place, torch_state
from spotproof.runtime.checkpointer.checkpoint import (
    Checkpoint,
    CheckpointStore,
    ReadsInPlace,
    SaveCancelled,
    SaveResult,
)
from spotproof.runtime.checkpointer.gang import await_teardown
from spotproof.runtime.checkpointer.manifest import GangMismatch
from spotproof.runtime.checkpointer.tiers import BUCKET, HeldResult
from spotproof.runtime.guard import FINAL_SAVE_MARGIN, PreemptionGuard
from spotproof.runtime.messages import redacted
from spotproof.runtime.settings import ConfigError
from spotproof.runtime.storage import StorageError, StorageURLError
from spotproof.smoke import BATCH_ROWS
from spotproof.smoke.distributed import (
    Gang,
    PeerLost,
    RendezvousInterrupted,
    Solo,
    gang_from,
)
from spotproof.smoke.trainer_events import await_last_scrape, emit, serve_metrics

DEPTH = 4
BYTES_PER_PARAMETER = 12  # fp32 weight + AdamW's two moments


@dataclass(frozen=True)
class TrainConfig:
    checkpoint_url: str
    interval: int
    total_steps: int
    seed: int = settings.SEED.default
    model_mb: float = settings.MODEL_MB.default
    grace_seconds: float = settings.GRACE_SECONDS.default
    step_seconds: float = settings.STEP_SECONDS.default
    keep: int = settings.KEEP_CHECKPOINTS.default
    part_kb: int | None = None
    """None: parts sized from the state (``spotproof.runtime.checkpointer.transfer.plan``)."""
    emit_steps: bool = settings.EMIT_STEPS.default
    threads: int = settings.TRAIN_THREADS.default
    peer_wait_seconds: float = settings.PEER_WAIT_SECONDS.default
    rendezvous_seconds: float = settings.RENDEZVOUS_SECONDS.default

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TrainConfig:
        """The configuration from ``env``; :class:`ConfigError` names the first variable
        that is missing, malformed or out of its range, and the range."""
        config = cls(
            checkpoint_url=settings.CHECKPOINT_URL.read(env),
            interval=settings.CHECKPOINT_INTERVAL.read(env),
            total_steps=settings.TOTAL_STEPS.read(env),
            seed=settings.SEED.read(env),
            model_mb=settings.MODEL_MB.read(env),
            grace_seconds=launcher.worker_grace(settings.GRACE_SECONDS.read(env), env),
            step_seconds=settings.STEP_SECONDS.read(env),
            keep=settings.KEEP_CHECKPOINTS.read(env),
            part_kb=settings.CHECKPOINT_PART_KB.read(env) or None,
            emit_steps=settings.EMIT_STEPS.read(env),
            threads=settings.TRAIN_THREADS.read(env),
            peer_wait_seconds=settings.PEER_WAIT_SECONDS.read(env),
            rendezvous_seconds=settings.RENDEZVOUS_SECONDS.read(env),
        )
        # Read by the storage layer itself (runtime.storage.deadlines); only checked here.
        settings.STORAGE_STARTUP_SECONDS.read(env)
        gang_from(env)  # read again where the gang assembles
        return config

    def run_identity(self) -> dict[str, Any]:
        """What makes two runs the same run: the weights and the data follow from these,
        so a checkpoint written under other values must never be resumed."""
        return {"seed": self.seed, "model_mb": self.model_mb}


def check_same_run(config: TrainConfig, checkpoint: Checkpoint) -> None:
    """Refuse to resume ``checkpoint`` if it was written by a different run. A checkpoint
    from before run identities were recorded is taken as it is."""
    ours = {
        key: value for key, value in config.run_identity().items() if key in checkpoint.metadata
    }
    theirs = {key: checkpoint.metadata[key] for key in ours}
    if theirs != ours:

        def spelled(values: Mapping[str, Any]) -> str:
            return ", ".join(f"{key}={value}" for key, value in values.items())

        raise ConfigError(
            f"{config.checkpoint_url} holds step {checkpoint.step} of another run "
            f"({spelled(theirs)}; this one has {spelled(ours)}): "
            "give this run its own CHECKPOINT_URL"
        )


def build(
    config: TrainConfig, gang: Solo
) -> tuple[torch.nn.Module, torch.nn.Module, torch.optim.Optimizer]:
    """An MLP sized so that weights plus AdamW state take about ``MODEL_MB``, the part of
    it this rank owns, and the optimizer of that part."""
    torch.manual_seed(config.seed)
    parameters = config.model_mb * 2**20 / BYTES_PER_PARAMETER
    width = max(8, int(math.sqrt(parameters / DEPTH)))
    layers: list[torch.nn.Module] = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Dropout(0.1)]
    model = torch.nn.Sequential(*layers)
    gang.seed_dropout(config.seed)
    owned = gang.owned(model)
    return model, owned, torch.optim.AdamW(owned.parameters(), lr=1e-3)


def batch(config: TrainConfig, step: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch ``step`` of an endless synthetic data set: the data position *is* the step."""
    generator = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
    inputs = torch.randn(BATCH_ROWS, width, generator=generator)
    return inputs, inputs.roll(1, dims=1)


def digest(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> str:
    """sha256 of the final model and optimizer state, in a fixed order."""
    hasher = hashlib.sha256(f"step={step}".encode())

    def feed(prefix: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            hasher.update(prefix.encode())
            hasher.update(torch_state.byte_view(value.detach().cpu().contiguous()))
        elif isinstance(value, dict):
            for key in sorted(value, key=str):
                feed(f"{prefix}/{key}", value[key])
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                feed(f"{prefix}/{index}", item)
        else:
            hasher.update(f"{prefix}={value!r}".encode())

    feed("model", model.state_dict())
    feed("optimizer", optimizer.state_dict())
    return hasher.hexdigest()


def train(config: TrainConfig, env: Mapping[str, str]) -> int:
    # The guard goes up first: a SIGTERM while the store opens or the checkpoint downloads
    # must still end in an orderly PREEMPTED exit, not the default handler's kill.
    with PreemptionGuard(config.grace_seconds) as guard:
        serve_metrics(config.interval, env)
        try:
            code = _join_and_train(config, guard, env)
        except RendezvousInterrupted:
            signal_name = guard.signal_received.name if guard.signal_received else "SIGTERM"
            emit("preempted", step=0, signal=signal_name, grace_left=round(guard.remaining(), 3))
            code = exit_codes.PREEMPTED  # nothing trained, nothing to save
        except PeerLost as error:
            emit("peer_lost", reason=str(error))
            print(f"spotproof.smoke.train: {error}", file=sys.stderr)
            code = exit_codes.PEER_LOST
        stopped_by_peer = code == exit_codes.PEER_LOST or (
            code == exit_codes.PREEMPTED and not guard.preempted
        )
        if stopped_by_peer:
            # The disrupted rank's Job must fail first, not this one's (runtime.checkpointer.gang).
            emit("awaiting_teardown", seconds=config.peer_wait_seconds)
            if not await_teardown(guard, config.peer_wait_seconds):
                return exit_codes.PEER_LOST
        return code


def _join_and_train(config: TrainConfig, guard: PreemptionGuard, env: Mapping[str, str]) -> int:
    gang = Gang.from_env(env, guard, config.rendezvous_seconds)
    try:
        return _train(config, guard, gang)
    finally:
        gang.close()


def _resume(
    config: TrainConfig, gang: Solo, store: CheckpointStore
) -> tuple[torch.nn.Module, torch.nn.Module, torch.optim.Optimizer, dict[str, Any]]:
    """The model, this rank's part of it, its optimizer and the ``resumed`` event's fields:
    the step to go on from, of the newest checkpoint that verifies and restores (in place),
    or a fresh start when none does. A checkpoint of another run stops the run
    (:class:`ConfigError`), as does one that this gang's shape cannot load."""
    model, owned, optimizer = build(config, gang)
    started, tried = time.perf_counter(), list[int]()
    resumed: dict[str, Any] = {"step": 0}

    @ReadsInPlace  # straight into the model's tensors (runtime.checkpointer.in_place)
    def take(checkpoint: Checkpoint) -> None:
        check_same_run(config, checkpoint)
        tried.append(checkpoint.step)
        resumed["step"] = in_place.restore(owned, optimizer, checkpoint)["step"]
        resumed.update(metrics.resumed_fields({}, checkpoint.metadata), bytes=checkpoint.nbytes)

    try:
        latest = gang.latest(store, lambda s, why: emit("skipped", step=s, reason=why), take)
    except GangMismatch as error:
        raise ConfigError(str(error)) from None
    if latest is not None:
        gang.share_parameters(model)
        resumed["restore_seconds"] = round(time.perf_counter() - started, 4)
    elif tried:  # each restore failed, and may have written part of its state: start afresh
        model, owned, optimizer = build(config, gang)
        resumed = {"step": 0}
    return model, owned, optimizer, resumed


def _train(config: TrainConfig, guard: PreemptionGuard, gang: Solo) -> int:
    torch.set_num_threads(config.threads)
    torch.use_deterministic_algorithms(True)
    part_bytes = config.part_kb * 1024 if config.part_kb else None
    store = gang.store(config.checkpoint_url, keep=config.keep, part_bytes=part_bytes)
    model, owned, optimizer, resumed = _resume(config, gang, store)
    step, width = resumed["step"], model[0].in_features
    tier = getattr(store, "loaded_from", "") or (BUCKET if resumed["step"] else "")
    emit("resumed", writer=store.writer_id, rank=gang.rank, tier=tier, **resumed)

    received: dict[str, float] = {}
    saver = gang.checkpointer(
        store,
        on_start=lambda s, kind: emit("saving", step=s, kind=kind),
        on_done=lambda result, kind: _report(result, kind, received.get("at")),
        on_retention_failed=lambda s, why: emit("retention_failed", step=s, reason=why),
    )
    buffer = torch_state.StateBuffer()

    def save(final: bool, deadline: float | None = None) -> SaveResult | None:
        copy = buffer.views if final else buffer.capture  # views: training has stopped
        capture = lambda: copy(owned, optimizer, step)  # noqa: E731
        metadata = {
            **config.run_identity(),
            "total_steps": config.total_steps,
            **metrics.save_metadata("final" if final else "periodic"),
        }
        if final:
            return saver.save_final(step, capture, metadata, deadline_seconds=deadline)
        saver.save_async(step, capture, metadata)
        return None

    loss_fn = torch.nn.MSELoss()
    stopping = gang.anyone(guard.preempted)
    while step < config.total_steps and not stopping:
        inputs, targets = batch(config, step, width)
        model.zero_grad(set_to_none=True)
        loss_fn(model(gang.rows(inputs)), gang.rows(targets)).backward()
        gang.average_gradients(model)
        optimizer.step()
        gang.share_parameters(model)
        step += 1
        if not buffer.ready:  # the optimizer has state now: size and touch the buffer
            buffer.prepare(owned, optimizer)
        emit("step", printed=config.emit_steps, step=step)
        # One rank's notice stops the whole gang at the same step.
        stopping = gang.anyone(guard.preempted)
        if stopping:
            break
        if step % config.interval == 0 and step < config.total_steps:
            save(final=False)
        if config.step_seconds:
            guard.wait(config.step_seconds)

    if stopping:
        received["at"] = guard.received_at or time.monotonic()
        signal_name = guard.signal_received.name if guard.signal_received else "a peer's"
        emit("preempted", step=step, signal=signal_name, grace_left=round(guard.remaining(), 3))
        try:
            _final_save_on_preemption(
                step, lambda: save(True, _final_deadline(config, guard)), guard
            )
        finally:  # a refused save's counts are the ones most worth reading
            await_last_scrape(guard)
        return exit_codes.PREEMPTED

    # The completed state is committed too, so a rerun of a finished Job finishes at once.
    save(final=True)
    emit("done", step=step, digest=gang.digest(digest(model, optimizer, step)))
    return exit_codes.COMPLETED


def _final_deadline(config: TrainConfig, guard: PreemptionGuard) -> float:
    """Seconds the final save of a stopping gang may take. The signalled rank has what is
    left of its grace. A rank stopped by a peer's notice has no grace of its own running,
    yet it must not wait longer than the peer can live: the peer records its shard within
    its grace or is killed and never does, and an unbounded wait for it would outlast the
    JobSet's teardown of this rank too."""
    left = guard.remaining() if guard.preempted else config.grace_seconds
    return left - FINAL_SAVE_MARGIN


def _final_save_on_preemption(
    step: int, save: Callable[[], SaveResult | None], guard: PreemptionGuard
) -> None:
    """The final save, bounded by the grace period: abandoned (and reported) rather than
    killed mid-upload when the store is too slow for what is left of it. The
    ``final_save`` event says how it ended (``runtime.metrics.recorders``)."""
    try:
        result = save()
    except SaveCancelled as abandoned:
        emit("checkpoint_refused", step=step, kind="final", reason=str(abandoned), late=True)
        emit("final_save", step=step, outcome="late")
        return
    except StorageError as error:
        emit("checkpoint_refused", step=step, kind="final", reason=redacted(str(error)))
        emit("final_save", step=step, outcome="refused")
        raise
    if result is not None and result.durable:
        emit("final_save", step=step, outcome="committed", grace_left=round(guard.remaining(), 4))
    else:
        emit("final_save", step=step, outcome="refused")


def _report(result: SaveResult, kind: str, signalled_at: float | None) -> None:
    """The ``checkpoint`` event once ``result`` is committed, or why it was refused."""
    if isinstance(result, HeldResult):  # in memory and on a peer; the bucket has older
        emit("checkpoint_held", step=result.step, replicated=result.replicated)
        return
    if not result.committed:
        emit("checkpoint_refused", step=result.step, kind=kind, reason=result.reason)
        return
    fields: dict[str, Any] = {
        "kind": kind,
        "bytes": result.bytes,
        "blocked_seconds": round(result.blocked_seconds, 4),
        "capture_seconds": round(result.capture_seconds, 4),
    }
    if kind == "final" and signalled_at is not None:
        fields["since_signal"] = round(time.monotonic() - signalled_at, 4)
    emit("checkpoint", step=result.step, seconds=round(result.seconds, 4), **fields)


def main() -> int:
    try:
        config = TrainConfig.from_env(os.environ)
        return train(config, os.environ)
    except (ConfigError, StorageURLError) as error:
        print(f"spotproof.smoke.train: {redacted(str(error))}", file=sys.stderr)
        return exit_codes.BAD_CONFIG
    except StorageError as error:
        print(f"spotproof.smoke.train: {redacted(str(error))}", file=sys.stderr)
        return exit_codes.STORAGE_UNAVAILABLE


def _leave(code: int) -> NoReturn:
    """Exit with ``code``, without interpreter teardown for a gang's rank (gloo's
    destructors abort the process, SIGABRT, about one time in three with a pair to a
    vanished peer open, hiding the exit code the failure policy reads) and for a preempted
    trainer (tearing down torch took seconds on a busy node: killed, 137, after a clean
    final save). Everything it wrote is flushed or committed by now."""
    gang = os.environ.get(settings.WORLD_SIZE.name, "1") not in ("", "1")
    if gang or code == exit_codes.PREEMPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    _leave(main())
