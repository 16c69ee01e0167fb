"""What happens to a gang's ranks, and what the harness makes of it: one rank or every
rank reclaimed along the configured path, one rank killed, the others torn down as a
JobSet deletes their pods, and the exit codes and losses each must show
(``smoke.runs.gang`` plays them against the reference trainer, ``smoke.user.gang`` against
a user's command)."""

from __future__ import annotations

import signal
import time

from spotproof.runtime import exit_codes
from spotproof.runtime.launcher import Launcher
from spotproof.smoke.processes.gang_ranks import GangProcesses, finish_all
from spotproof.smoke.processes.trainer_process import TrainerProcess
from spotproof.smoke.reports.records import Interruption, SmokeConfig, SmokeReport, judge_recovery

LEAVE_SECONDS = 30.0
"""How long ranks get to notice a dead peer and stop before they are killed."""


def interrupt(
    gang: GangProcesses, scenario: str, config: SmokeConfig, record: Interruption
) -> list[int | None]:
    last, peers = gang.ranks[-1], gang.ranks[:-1]
    noticed = last.now()
    if scenario == "kill one rank":
        last.send(signal.SIGKILL)
        last.finish()
        record.at_step = last.last_step
        codes = [*tear_down(peers, LEAVE_SECONDS, record), last.popen.returncode]
        record.waited_seconds = round(last.now() - noticed, 3)
        return codes
    victims = [last] if scenario == "preempt one rank" else gang.ranks
    grace = reclaim(victims, config, record)
    signalled = last.now()
    if scenario == "preempt one rank":
        code = last.finish(grace)
        if code is None:
            last.send(signal.SIGKILL)
            last.finish()
        codes = [*tear_down(peers, max(grace, LEAVE_SECONDS), record), code]
    else:
        codes = gang.finish(grace)
    record.sigkilled_after_grace = record.sigkilled_after_grace or any(c is None for c in codes)
    killed = [rank for rank, code in zip(gang.ranks, codes, strict=True) if code is None]
    record.last_seen = [rank.last_seen(since=signalled) for rank in killed]
    stopped = [e for r in gang.ranks for e in r.of("preempted")]
    record.at_step = max((int(e["step"]) for e in stopped), default=gang.step)
    finals = [
        float(e.get("since_signal", e["seconds"]))
        for r in gang.ranks
        for e in r.of("checkpoint")
        if e.get("kind") == "final"
    ]
    record.final_save_seconds = max(finals) if finals else None
    record.grace_seconds = grace
    record.waited_seconds = round(last.now() - noticed, 3)
    return codes


def reclaim(victims: list[TrainerProcess], config: SmokeConfig, record: Interruption) -> float:
    """The reclaim of the victims' nodes along the configured preemption path (a stack's,
    with ``--stack``): SIGTERM ``sigterm_after`` the notice, and the grace left before the
    node is gone; a path that sends no SIGTERM kills them when the node goes (grace 0)."""
    record.sigterm_after = config.sigterm_after
    if config.sigterm_after is None:
        time.sleep(config.gone_after or 0)  # they train on, unaware, until the node is gone
        for rank in victims:
            rank.send(signal.SIGKILL)
        record.sigkilled_after_grace = True
        return 0.0
    time.sleep(config.sigterm_after)
    for rank in victims:
        rank.send(signal.SIGTERM)
    if config.gone_after is None:
        return config.grace_seconds
    return min(config.grace_seconds, config.gone_after - config.sigterm_after)


def tear_down(
    peers: list[TrainerProcess], timeout: float, record: Interruption
) -> list[int | None]:
    """What the JobSet does once the disrupted rank's Job has failed: delete the other
    pods (SIGTERM). Each peer must be waiting for it by then, not gone on its own."""
    for peer in peers:
        try:
            waiting = peer.wait_for(lambda e: e["event"] == "awaiting_teardown", timeout)
        except TimeoutError:  # still busy: torn down all the same
            waiting = None
        if waiting is None:
            record.peers_not_waiting.append(peer.index)
        peer.send(signal.SIGTERM)
    return finish_all(peers, timeout)


def judge_scenario(
    scenario: str,
    codes: list[int | None],
    record: Interruption,
    config: SmokeConfig,
    report: SmokeReport,
    *,
    started_by: Launcher,
) -> None:
    if scenario == "kill one rank":
        # Torn down, a rank that stopped with its peer exits PEER_LOST; under torchrun the
        # launch script reports that stop after SIGTERM as PREEMPTED.
        torn_down = (
            exit_codes.PREEMPTED if started_by is Launcher.TORCHRUN else exit_codes.PEER_LOST
        )
        expected = [torn_down] * (len(codes) - 1) + [-signal.SIGKILL]
        # The newest checkpoint is at most an interval old, plus the interval trained while
        # it uploaded when the kill caught the upload in flight.
        record.max_steps_lost = 2 * config.interval
    else:
        expected = [exit_codes.PREEMPTED] * len(codes)
        record.max_steps_lost = 0
        if record.final_save_seconds is None or record.sigkilled_after_grace:
            report.failures.append(
                f"{scenario}: the final checkpoint of step {record.at_step} did not commit "
                f"within the {record.grace_seconds or 0:g} s grace"
                + "".join(f"; {seen}" for seen in record.last_seen)
            )
    if codes != expected:
        report.failures.append(f"{scenario}: ranks exited {codes}, expected {expected}")
    if record.peers_not_waiting:
        report.failures.append(
            f"{scenario}: trainer(s) {record.peers_not_waiting} stopped by a peer were not "
            "waiting to be torn down (gone already, or still busy); a Job that fails before "
            "the disrupted rank's spends a counted restart"
        )
    judge_recovery(scenario, record, report, "the gang")
