"""A user's own trainer, as ``spotproof smoke --command`` runs it: the command line, the
environment each of its processes gets, and what the rehearsal learns from its reference
run and records of it.

The command is the user's, run in their project as they would run it (``python
train.py``), split as a shell would split it but started without one: a pod starts its
container's command without a shell too. What the rehearsal adds is what a Job would set
and what it reads back: ``CHECKPOINT_URL`` (the emulated bucket's prefix of this run),
``CHECKPOINT_INTERVAL``, ``GRACE_SECONDS``, every step as an event (``EMIT_STEPS``), each
save's digest of every part of the state (``SPOTPROOF_STATE_DIGESTS``), every save kept
(``KEEP_CHECKPOINTS``) so two runs can be compared save by save, and a file of its own for
each process's events (``SPOTPROOF_EVENTS``), so that the trainer's stdout stays its own.
"""

from __future__ import annotations

import shlex
import shutil
import signal
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spotproof.runtime import exit_codes, settings
from spotproof.runtime.launcher import Launcher
from spotproof.smoke.emulation.object_stores import Bucket
from spotproof.smoke.processes.aimed_kill import ManifestGate
from spotproof.smoke.processes.trainer_process import Event, TrainerProcess
from spotproof.smoke.processes.warm import Zygote
from spotproof.smoke.reports.records import Progress, SmokeConfig, SmokeReport

DEFAULT_INTERVAL = 10
"""``CHECKPOINT_INTERVAL`` of a user's trainer rehearsed without ``--interval`` or a stack:
a small script of about a hundred steps then saves often enough to be interrupted several
times."""
KEEP_EVERY_SAVE = 1000
"""``KEEP_CHECKPOINTS`` for the user's processes (its largest value): a differing digest is
traced to the first save where the two runs part."""
SHELL_WORDS = frozenset({"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1", "&>"})
"""Words that mean something to a shell only: a command that needs them needs a shell."""
OUTPUT_LINES = 5
"""Lines of a process's output a failure shows."""
DONE_SECONDS = 3600.0
"""The longest a process may take from resuming to its ``done``."""


class CommandError(ValueError):
    """A command the rehearsal cannot run (not found, refused its configuration): bad
    input, exit 2, its message the one line to print."""


def resuming(event: Event) -> bool:
    return event.get("event") == "resumed"


def restoring(event: Event) -> bool:
    return event.get("event") == "restoring"


@dataclass(frozen=True)
class UserCommand:
    """The command line as given, and its words."""

    text: str
    words: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> UserCommand:
        """The words of ``text``; :class:`CommandError` for a line that is empty, quoted
        wrongly, needs a shell, or whose program is not found."""
        try:
            words = tuple(shlex.split(text))
        except ValueError as error:
            raise CommandError(
                f"--command {text!r}: {error}; allowed: words as a shell splits them"
            ) from None
        if not words:
            raise CommandError("--command is empty; allowed: the command that runs your trainer")
        shell = [word for word in words if word in SHELL_WORDS]
        if shell or "=" in words[0]:
            why = f"{shell[0]!r}" if shell else f"the variable {words[0]!r}"
            raise CommandError(
                f"--command {text!r}: {why} needs a shell, and a pod starts its command "
                "without one; allowed: one program and its arguments (put the rest in a script)"
            )
        if shutil.which(words[0]) is None:
            raise CommandError(
                f"--command {text!r}: {words[0]!r} is not found (or not executable) on PATH; "
                "allowed: a program on PATH, or a path to one"
            )
        return cls(text, words)


def command_env(config: SmokeConfig, bucket: Bucket, name: str) -> dict[str, str]:
    """The environment a user's process writing under ``name`` in ``bucket`` gets, on top of
    the one the rehearsal was started with."""
    return {
        **bucket.env,
        settings.CHECKPOINT_URL.name: bucket.prefix(name),
        settings.CHECKPOINT_INTERVAL.name: str(config.interval),
        settings.GRACE_SECONDS.name: f"{config.grace_seconds:g}",
        settings.KEEP_CHECKPOINTS.name: str(KEEP_EVERY_SAVE),
        settings.EMIT_STEPS.name: "1",
        settings.STATE_DIGESTS.name: "1",
        "PYTHONUNBUFFERED": "1",  # its last lines are shown when it fails, even if killed
    }


def started(start: Any, *args: Any, **kwargs: Any) -> Any:
    """``start(*args, **kwargs)``: the command's first process; :class:`CommandError` when
    it cannot be executed at all."""
    try:
        return start(*args, **kwargs)
    except OSError as error:
        raise CommandError(f"--command cannot be started: {error.strerror or error}") from None


def output_tail(process: TrainerProcess, lines: int = OUTPUT_LINES) -> str:
    """The process's last lines of output, joined into one line, or its exit code."""
    kept = [line for line in process.stderr if line.strip()][-lines:]
    return " | ".join(kept) if kept else f"no output, exit code {process.popen.returncode}"


def finished(process: TrainerProcess, report: SmokeReport, label: str) -> Event | None:
    """The ``done`` event of a process that trains to its end and exits 0; None otherwise,
    with why, and its last lines, in ``report``."""
    done = process.wait_for(lambda e: e.get("event") == "done", DONE_SECONDS)
    code = process.finish(timeout=60)
    if done is None or code != exit_codes.COMPLETED:
        report.failures.append(f"{label} did not complete (exit {code}): {output_tail(process)}")
        return None
    return done


def never_trained(process: TrainerProcess, command: UserCommand) -> str:
    """Why ``process`` ended before resuming, in one line; :class:`CommandError` when it
    refused its configuration (exit 2, or ``training()``'s ``exit`` event saying so), which
    no rehearsal can get past."""
    process.finish(timeout=30)
    code = process.popen.returncode
    refused = [e for e in process.of("exit") if e.get("code") == exit_codes.BAD_CONFIG]
    if code == exit_codes.BAD_CONFIG or refused:
        why = refused[-1].get("reason") if refused else None
        raise CommandError(
            f"--command {command.text!r} exited 2 (bad configuration) before it trained: "
            f"{why or output_tail(process, 1)}"
        )
    if process.first("restoring") is None:
        return (
            f"{command.text!r} exited {code} before it started training(): does it train "
            f"through spotproof's training()? Its output: {output_tail(process)}"
        )
    return f"{command.text!r} exited {code} while it restored: {output_tail(process)}"


@dataclass
class RunResult:
    """One lineage of the user's processes, to its end."""

    name: str
    url: str
    done: Event | None = None
    """The ``done`` event (every rank's agreed, in a gang); None when it never completed."""
    seconds: float = 0.0
    processes: list[TrainerProcess] = field(default_factory=list)

    @property
    def digest(self) -> str | None:
        return None if self.done is None else str(self.done.get("digest"))

    @property
    def states(self) -> dict[str, str]:
        states = (self.done or {}).get("states")
        return dict(states) if isinstance(states, dict) else {}

    @property
    def resumes(self) -> list[int]:
        """The steps its processes resumed from, where they had a checkpoint, in order."""
        found = [p.first("resumed") for p in self.processes]
        return sorted({int(e["step"]) for e in found if e is not None and e.get("step")})

    def startups(self) -> list[float]:
        """Each process's start to its ``restoring`` event: the interpreter, imports, the
        model built, a gang assembled."""
        found = []
        for process in self.processes:
            at = next((t for t, e in process.events if e.get("event") == "restoring"), None)
            if at is not None:
                found.append(at - process.started)
        return found


def learned(config: SmokeConfig, reference: RunResult) -> SmokeConfig:
    """``config`` with what the reference run showed: its total steps (the script decides
    them), and its checkpoint interval, which ``training(interval=...)`` may set in code
    over ``CHECKPOINT_INTERVAL``."""
    total = int((reference.done or {}).get("step") or 0)
    first = reference.processes[0] if reference.processes else None
    periodic = sorted(
        int(e["step"]) for e in (first.of("saving") if first else []) if e.get("kind") == "periodic"
    )
    interval = periodic[0] if periodic else config.interval
    return replace(config, total_steps=total, interval=interval)


def room_for(config: SmokeConfig, interruptions: int) -> str | None:
    """Why the learned run is too short to interrupt ``interruptions`` times, or None when
    it is long enough: each is placed within two intervals of the resume before it."""
    needed = (2 * interruptions + 1) * config.interval
    if config.total_steps >= needed:
        return None
    return (
        f"the command trains {config.total_steps} steps, checkpointing every "
        f"{config.interval}: too few for {interruptions} interruption(s); allowed: at least "
        f"{needed} steps (2 intervals each, and one more), fewer --preemptions/--hard-kills, "
        "or a smaller --interval"
    )


@dataclass
class CommandReport(SmokeReport):
    """A rehearsal of a user's command: :class:`SmokeReport`'s, with what only it has."""

    command: str = ""
    nodes: int = 1
    second_reference_digest: str | None = None
    """The digest of a second uninterrupted run, where the first two runs' digests differed."""
    diagnosis: list[str] = field(default_factory=list)
    """Which part of the state differs, from which save on, and what that means."""
    time_spent: dict[str, float] = field(default_factory=dict)
    """Where the rehearsal's time went, in seconds (``smoke.user.rehearsal.TIME_SPENT``)."""


@dataclass
class Stage:
    """What every run of one rehearsal of a user's command shares."""

    config: SmokeConfig
    command: UserCommand
    bucket: Bucket
    events_dir: Path
    """Where each process's events file goes."""
    report: CommandReport
    progress: Progress
    gate: ManifestGate | None = None
    """The relay the interrupted run's processes reach the bucket through (object stores)."""
    nodes: int = 1
    started_by: Launcher = Launcher.TORCHRUN
    tiers: bool = False
    """The gang's ranks replaced one at a time, their saves held in memory and replicated
    (``smoke.user.tiers``); False: the whole gang restarted after each interruption."""
    zygote: Zygote | None = None
    """Where a single process's ``python train.py`` is forked from, warm
    (``smoke.processes.warm``); None starts every process afresh."""
    runs: list[list[TrainerProcess]] = field(default_factory=list)
    """The processes of every run, as they are started: whatever a failure leaves running
    is killed before the rehearsal ends (:meth:`kill_leftovers`)."""

    def kill_leftovers(self) -> None:
        for process in (p for run in self.runs for p in run):
            if process.popen.poll() is None:
                process.send(signal.SIGKILL)
                process.finish(timeout=10)
