"""One trainer lineage writing to one checkpoint prefix: each process started after the one
before it is gone (or, on a Job's overlapped restart, while it is still saving), as a Job
restarts its pod. The reference trainer's (``smoke.runs.solo``) and a user's command's
(``smoke.user.solo``) alike."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.metrics import Registry, TrainerMetrics, names
from spotproof.runtime.storage import ObjectStore, open_store
from spotproof.smoke.emulation.object_stores import Bucket
from spotproof.smoke.processes.aimed_kill import ManifestGate
from spotproof.smoke.processes.trainer_process import Event, TrainerProcess
from spotproof.smoke.processes.warm import Zygote
from spotproof.smoke.reports.records import (
    Attempt,
    Progress,
    SmokeConfig,
    attempt_of,
    last_words,
    trainer_env,
)


class Lineage:
    """The processes of one run under ``name`` in ``bucket``: the reference trainer by
    default; with ``argv``, that command with ``env``, each process writing its events to
    a file of its own under ``events_dir``."""

    def __init__(
        self,
        config: SmokeConfig,
        bucket: Bucket,
        name: str,
        progress: Progress,
        metrics: Registry | None = None,
        *,
        gate: ManifestGate | None = None,
        zygote: Zygote | None = None,
        argv: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        events_dir: Path | None = None,
    ):
        self.config, self.progress = config, progress
        self.name = name
        self.url = bucket.prefix(name)
        self.bucket = bucket
        self.origin = time.monotonic()
        self.processes: list[TrainerProcess] = []
        self.env = env if env is not None else trainer_env(config, bucket, name)
        self.gate = gate
        """The relay between this run's trainers and the bucket, where one is needed."""
        if gate is not None:
            self.env = gate.route(self.env)
        self.zygote = zygote
        """Where the trainers are forked from (``smoke.processes.warm``); None starts each
        afresh."""
        self.metrics = metrics
        self.argv = argv
        self.events_dir = events_dir
        self.pause_on: Callable[[Event], bool] | None = None
        """Where each process started from now on is held (``TrainerProcess.run_until``):
        a user's trainer is held as it resumes, or as it begins to restore."""

    def start(self) -> TrainerProcess:
        recorder = (
            TrainerMetrics(self.metrics, self.config.interval, count_lost_steps=False)
            if self.metrics is not None
            else None
        )
        index = len(self.processes)
        events = self.events_dir / f"{self.name}-{index}.jsonl" if self.events_dir else None
        process = TrainerProcess(
            self.env,
            self.origin,
            index=index,
            argv=self.argv,
            on_event=recorder.observe if recorder else None,
            zygote=self.zygote,
            events_file=events,
            pause_on=self.pause_on,
        )
        self.processes.append(process)
        return process

    def lost(self, steps: int) -> None:
        if self.metrics is not None and steps > 0:
            self.metrics(names.STEPS_LOST).inc(steps)

    def resumed(self, process: TrainerProcess) -> int:
        event = process.wait_for(lambda e: e["event"] == "resumed")
        if event is None:
            raise RuntimeError(
                f"trainer {process.index} exited before resuming: {last_words(process)}"
            )
        return int(event["step"])

    def announce(self, process: TrainerProcess, resumed: int) -> None:
        """An attempt's start, said after whatever ended the attempt before it."""
        where = "from scratch" if resumed == 0 else f"from step {resumed}"
        self.progress(f"  attempt {process.index}: trains {where}")

    @functools.cached_property
    def observer(self) -> ObjectStore:
        """A client of the run's bucket, ready before it is needed: aimed kills poll it."""
        with self.bucket.apply():
            return open_store(self.url)

    def newest_committed(self) -> int | None:
        steps = CheckpointStore(self.url, store=self.observer).committed_steps()
        return steps[-1] if steps else None

    def attempts(self) -> list[Attempt]:
        return [attempt_of(p) for p in self.processes]
