"""A kill while a replacement restores: the node lost again before the pod it restarted has
its state back.

A restore only reads: killing it must leave every committed checkpoint as it was, and the
next start must resume from the same step, losing nothing more. To land the kill inside
the restore on any machine, not whenever the harness happens to look:

- **Object stores** (the S3, GCS and Azure emulators): the relay in front of the emulator
  (``smoke.processes.aimed_kill.ManifestGate``'s) holds back the first request under
  ``steps/`` once the replacement has started: the listing or download of the checkpoint's
  parts, which a restore makes only after it has read the manifest. The replacement is killed
  while it waits for that answer.
- **The file store** has no wire: the replacement is held (SIGSTOP) as it says
  ``restoring``, and killed there, before it reads anything.

Which interruption is followed by the kill: the first hard kill (its process is gone,
nothing of it still writes), else the last preemption (played without an overlapping
replacement, for the same reason).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence

from spotproof.runtime.checkpointer.layout import STEP_NAME, STEPS
from spotproof.smoke.emulation.fault_proxy import Fault
from spotproof.smoke.processes.aimed_kill import ManifestGate
from spotproof.smoke.processes.trainer_process import TrainerProcess
from spotproof.smoke.reports.records import RESTORE_KILL, Interruption, SmokeReport, judge_recovery
from spotproof.smoke.user.command import output_tail, restoring

READ_OF_A_STEP = ("GET|HEAD", rf"{STEPS}(?:/|%2F)({STEP_NAME.pattern})")
"""A request for anything under ``steps/<step>``, its key in the path (S3, Azure, a GCS
download) or URL-encoded in a listing's prefix."""


def restore_kill_after(kinds: Sequence[str]) -> int | None:
    """The index of the interruption whose replacement is killed while it restores."""
    if "hard-kill" in kinds:
        return list(kinds).index("hard-kill")
    return len(kinds) - 1 if kinds else None


def hold_reads(gate: ManifestGate | None) -> Fault | None:
    """Hold back the next read of a checkpoint's parts; None without a gate (file store).
    Armed as soon as the replacement is started: its interpreter takes far longer to start
    than this takes."""
    if gate is None:
        return None
    gate.proxy.clear()
    method, target = READ_OF_A_STEP
    return gate.proxy.add(Fault(method, target, "hold", times=1))


def kill_in_restore(
    processes: Sequence[TrainerProcess],
    gate: ManifestGate | None,
    fault: Fault | None,
    record: Interruption,
    timeout: float = 300,
) -> list[int | None]:
    """SIGKILL every process of the replacement once its restore is caught (a read held by
    ``fault``; without one, the last process held at ``restoring``), and record where
    the kill landed; the exit codes."""
    if fault is not None:
        deadline = time.monotonic() + timeout
        while not fault.hit.wait(0.05):
            ended = all(p.popen.poll() is not None for p in processes)
            if ended or time.monotonic() > deadline or processes[-1].first("resumed"):
                break
    else:
        processes[-1].wait_for(restoring, timeout)
    for process in processes:
        process.send(signal.SIGKILL)
    codes = [process.finish() for process in processes]
    if gate is not None:
        gate.disarm()
    record.at = round(processes[0].now(), 3)
    if fault is not None and fault.hit.is_set() and fault.last is not None:
        record.kill_point, record.upload_step = "in-restore", int(fault.last[1])
    elif any(p.first("resumed") is not None for p in processes):
        record.kill_point = "after-restore"
    else:
        record.kill_point = "at-restore"
    return codes


def judge_restore(
    record: Interruption, processes: Sequence[TrainerProcess], report: SmokeReport
) -> None:
    """Killed, every process of it; the next start resumed from the step it was restoring,
    nothing lost."""
    codes = [process.popen.returncode for process in processes]
    expected = [-signal.SIGKILL] * len(codes)
    if codes != expected:
        ended = [output_tail(p) for p in processes if p.popen.returncode != -signal.SIGKILL]
        report.failures.append(
            f"{RESTORE_KILL}: the replacement exited {codes} before it could be killed "
            f"while restoring (expected {expected}): {'; '.join(ended)}"
        )
    record.max_steps_lost = 0
    judge_recovery(RESTORE_KILL, record, report, "the next start")
