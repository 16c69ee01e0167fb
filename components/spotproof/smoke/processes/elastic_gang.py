"""A gang's pods as ``TrainingJob(recovery=GangRecovery.REPLACE_RANK)`` starts them, on one
machine: each pod the launch script, torchrun's elastic agent and its worker, with an
address of its own on loopback and a directory that stands for its memory-backed
``emptyDir``. Pods are replaced one at a time, as the Job controller replaces the pod of
an index its failure policy ignores, or all together, as a JobSet restarts a gang
(``smoke.runs.tiered`` plays the interruptions)."""

from __future__ import annotations

import secrets
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from spotproof.runtime import elastic, launcher, settings
from spotproof.smoke.emulation.object_stores import free_port
from spotproof.smoke.processes.trainer_process import (
    Event,
    TrainerProcess,
    descendants,
    runs_module,
)
from spotproof.smoke.reports.records import SmokeReport, last_words

PERSIST_EVERY = 3
"""The rehearsal persists every third periodic save: most kills then find memory ahead
of the bucket."""
REPLACEMENT_SECONDS = 1.0
"""From a pod's end to its replacement's start: a spare node that is already there, the
image already on it, and the Job controller's reaction."""
JOIN_SECONDS = 120
"""How long the agents wait for the gang to assemble (``join_timeout``)."""
TEARDOWN_WAIT_SECONDS = 120
"""How long a pod whose agent failed waits to be torn down (``TEARDOWN_WAIT_ENV``)."""
MAX_RESTARTS = 0
"""Worker failures each agent tolerates: none, so the rehearsal proves that a reclaim
spends none (a survivor's worker waits to be stopped by its agent when the replacement
joins); a worker that failed instead would fail its agent, and the gang would not resume."""


class Nodes:
    """The directory standing for each pod's memory; a replaced pod's is deleted."""

    def __init__(self, root: Path, size: int) -> None:
        self.root, self.generation = root, [0] * size
        self.secret = root / "replica-secret"  # the one Secret every pod of the gang mounts
        root.mkdir(parents=True, exist_ok=True)
        self.secret.write_text(secrets.token_hex(32))

    def memory(self, rank: int) -> Path:
        return self.root / f"node-{rank}.{self.generation[rank]}"

    def env(self, rank: int) -> dict[str, str]:
        return {
            settings.MEMORY_TIER_DIR.name: str(self.memory(rank)),
            settings.PERSIST_EVERY.name: str(PERSIST_EVERY),
            settings.REPLICA_PORT.name: "0",
            settings.REPLICA_SECRET_FILE.name: str(self.secret),
            settings.NODE_NAME.name: self.memory(rank).name,
        }

    def lose(self, rank: int) -> None:
        shutil.rmtree(self.memory(rank), ignore_errors=True)
        self.generation[rank] += 1


def pod_address(index: int) -> str:
    """Pod ``index``'s address: two digits, so the agents' order by address is the pods'."""
    return f"127.0.1.{10 + index}"


REFERENCE_WORKER = (sys.executable, "-m", "spotproof.smoke.train")
"""The worker every agent starts unless told otherwise: the smoke trainer."""


AGENT_MODULE = launcher.WARM_TORCHRUN_MODULE
"""What every pod's agent runs, as a replace-rank gang's pods do: spotproof's torchrun,
whose workers start warm (``runtime.warm_torchrun``)."""


def is_agent(pid: int) -> bool:
    """Whether process ``pid`` is a torchrun agent (its workers run below it)."""
    return runs_module(pid, AGENT_MODULE)


def agent_running(pod: TrainerProcess) -> bool:
    """Whether torchrun's agent still runs in ``pod`` (a process below its launch script)."""
    return any(is_agent(pid) for pid in descendants(pod.popen.pid))


class ElasticGang:
    """The pods of one gang under torchrun's elastic agents; pods are replaced one at a
    time, or all together as the JobSet restarts a gang.

    Each pod's events go to a file of its own beside the pods' memory (its workers, one
    after another, append to it), so a pod's worker can be held at a step (``hold_at``,
    ``run_until``) while its agent keeps running: a trainer of fast steps is interrupted
    where the rehearsal places it. ``worker``: what each agent starts (a user's command,
    or the smoke trainer)."""

    def __init__(
        self,
        env: dict[str, str],
        nodes: Nodes,
        origin: float,
        worker: Sequence[str] = REFERENCE_WORKER,
    ) -> None:
        self.env, self.nodes, self.origin = env, nodes, origin
        self.worker = tuple(worker)
        self.events_dir = nodes.root / "events"
        self.events_dir.mkdir(exist_ok=True)
        self.started = 0
        self.endpoint = ""
        self.pods: list[TrainerProcess] = []
        self.every_pod: list[TrainerProcess] = []
        self.restart_all()

    @property
    def size(self) -> int:
        return len(self.nodes.generation)

    def _start(self, index: int) -> TrainerProcess:
        grace = int(float(self.env[settings.GRACE_SECONDS.name]))
        torchrun = elastic.elastic_torchrun(
            nodes=self.size,
            processes_per_node=1,
            endpoint=self.endpoint,
            hosts_store=index == 0,
            run_id="rehearsal",
            max_restarts=MAX_RESTARTS,
            join_timeout=JOIN_SECONDS,
            local_addr=pod_address(index),
            executable=(sys.executable, "-m", AGENT_MODULE),
        )
        env = {
            **self.env,
            **self.nodes.env(index),
            **elastic.elastic_environment(grace, TEARDOWN_WAIT_SECONDS, JOIN_SECONDS),
            settings.POD_IP.name: pod_address(index),
        }
        pod = TrainerProcess(
            env,
            self.origin,
            index=self.started,
            argv=launcher.wrapped([*torchrun, *self.worker]),
            events_file=self.events_dir / f"pod{self.started}.jsonl",
            held_below=is_agent,
        )
        self.started += 1
        self.every_pod.append(pod)
        return pod

    def replace(self, index: int) -> None:
        """Pod ``index`` is gone with its memory; its replacement starts shortly after."""
        self.nodes.lose(index)
        time.sleep(REPLACEMENT_SECONDS)
        self.pods[index] = self._start(index)

    def restart_all(self) -> None:
        """Every pod new, every pod's memory empty, a new rendezvous: a JobSet's restart."""
        for index in range(self.size):
            if self.pods:
                self.nodes.lose(index)
        self.endpoint = f"{pod_address(0)}:{free_port()}"
        self.pods = [self._start(index) for index in range(self.size)]

    def resumed(self, lives: list[int], report: SmokeReport) -> list[Event]:
        """Each pod's next ``resumed`` event: the ``lives[k]``-th of pod k's workers."""
        events = []
        for pod, life in zip(self.pods, lives, strict=True):
            event = pod.wait_for(_nth("resumed", life), timeout=JOIN_SECONDS + 60)
            if event is None:
                report.failures.append(f"pod {pod.index} ended before resuming: {last_words(pod)}")
                raise Abandoned
            events.append(event)
        return events

    def lives(self) -> list[int]:
        """How many workers each pod has started so far."""
        return [len(pod.of("resumed")) for pod in self.pods]

    @property
    def step(self) -> int:
        return max(pod.last_step for pod in self.pods)


class Abandoned(Exception):
    """The rehearsal cannot go on; the reason is in the report."""


def _nth(name: str, n: int) -> Callable[[Event], bool]:
    seen = [0]

    def match(event: Event) -> bool:
        if event.get("event") != name:
            return False
        seen[0] += 1
        return seen[0] == n

    return match
