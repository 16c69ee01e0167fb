"""A gang's ranks as processes: one start of ``nodes`` trainer processes meeting on a fresh
port, each given what a JobSet's pod gives it (its rank, or torchrun and the launch
script), and their ends awaited together. ``smoke.runs.gang`` starts the reference trainer
as a gang, ``smoke.user.gang`` a user's command, and ``smoke.runs.gang_faults`` plays what
happens to the ranks."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from spotproof.runtime import launcher, settings
from spotproof.runtime.launcher import Launcher
from spotproof.smoke.emulation.object_stores import free_port
from spotproof.smoke.processes.trainer_process import Event, TrainerProcess
from spotproof.smoke.processes.warm import Zygote
from spotproof.smoke.reports.records import SmokeReport, last_words


class GangProcesses:
    """One start of the gang: ``nodes`` trainer processes meeting on a fresh port."""

    def __init__(
        self,
        env: dict[str, str],
        nodes: int,
        origin: float,
        index: int,
        *,
        started_by: Launcher = Launcher.NONE,
        node_env: Callable[[int], dict[str, str]] | None = None,
        command: Sequence[str] | None = None,
        events_dir: Path | None = None,
        pause_on: Callable[[Event], bool] | None = None,
        zygote: Zygote | None = None,
    ) -> None:
        """``node_env(rank)``: what the node rank ``rank`` lands on adds (its memory).
        ``command``: what each rank runs instead of the reference trainer (a user's), its
        events then written to a file of each rank's own under ``events_dir``; the last
        rank is held at the first event matching ``pause_on`` (the gang steps together, so
        holding one holds them all). ``zygote``: where the reference trainer's ranks are
        forked from when they start themselves (``Launcher.NONE``), warm."""
        port, grace = free_port(), settings.GRACE_SECONDS.read(env)
        self.ranks = [
            TrainerProcess(
                {
                    **env,
                    **_rank_env(started_by, nodes, rank, port, grace),
                    **(node_env(rank) if node_env else {}),
                },
                origin,
                index=index * nodes + rank,
                argv=_rank_argv(started_by, nodes, rank, port, command),
                events_file=events_dir / f"gang{index}-rank{rank}.jsonl" if events_dir else None,
                pause_on=pause_on if rank == nodes - 1 else None,
                zygote=zygote,
            )
            for rank in range(nodes)
        ]
        self.index = index
        self.started_by = started_by

    def resumed(self) -> list[int]:
        steps = []
        for rank in self.ranks:
            event = rank.wait_for(lambda e: e["event"] == "resumed")
            if event is None:
                raise RuntimeError(f"rank {rank.index} exited before resuming: {last_words(rank)}")
            steps.append(int(event["step"]))
        return steps

    def finish(self, timeout: float) -> list[int | None]:
        return finish_all(self.ranks, timeout)

    def reaches(self, step: int, total_steps: int, scenario: str, report: SmokeReport) -> bool:
        """Whether the last rank trains to ``step`` for ``scenario``; why not, in ``report``."""
        if step >= total_steps - 1:
            report.failures.append(f"TOTAL_STEPS too small to {scenario} at step {step}")
            return False
        last = self.ranks[-1]
        if last.wait_for(lambda e: e["event"] == "step" and e["step"] >= step) is None:
            ended = last_words(last)
            report.failures.append(f"rank {last.index} ended before step {step}: {ended}")
            return False
        return True

    @property
    def step(self) -> int:
        return max(rank.last_step for rank in self.ranks)


def _rank_env(started_by: Launcher, nodes: int, rank: int, port: int, grace: float) -> dict:
    """What a JobSet's pod gives the trainer; under torchrun, torchrun's timeout from the
    pod's grace as TrainingJob renders it (``kube.jobset``), and torchrun does the rest."""
    if started_by is Launcher.TORCHRUN:
        return launcher.shutdown_environment(int(grace))
    return {
        settings.RANK.name: str(rank),
        settings.WORLD_SIZE.name: str(nodes),
        settings.MASTER_ADDR.name: "127.0.0.1",
        settings.MASTER_PORT.name: str(port),
    }


def _rank_argv(
    started_by: Launcher, nodes: int, rank: int, port: int, command: Sequence[str] | None = None
) -> list[str] | None:
    """The command of rank ``rank``'s pod, as TrainingJob renders it (``kube.jobset``), with
    the rendezvous on loopback and this interpreter's ``spotproof-torchrun``, then
    ``command`` (the words torchrun runs as an executable: ``--no-python``), by default this
    interpreter's trainer."""
    if started_by is Launcher.NONE:
        return list(command) if command else None
    torchrun = launcher.torchrun(
        nodes=nodes,
        processes_per_node=1,
        node_rank=str(rank),
        master_addr="127.0.0.1",
        master_port=port,
        executable=(sys.executable, "-m", launcher.WARM_TORCHRUN_MODULE),
    )
    trainer = command or [sys.executable, "-m", "spotproof.smoke.train"]
    return launcher.wrapped([*torchrun, *trainer])


def finish_all(ranks: list[TrainerProcess], timeout: float) -> list[int | None]:
    """Every rank's exit code; ranks still running after ``timeout`` are killed (None)."""
    deadline = time.monotonic() + timeout
    codes = [rank.finish(max(deadline - time.monotonic(), 0.01)) for rank in ranks]
    for rank, code in zip(ranks, codes, strict=True):
        if code is None:
            rank.send(signal.SIGKILL)
            rank.finish()
    return codes
