"""Events to metrics: what the trainer's and the worker's recorders count for each event."""

from __future__ import annotations

import pytest

from spotproof.runtime.metrics import Registry, TrainerMetrics, WorkerMetrics, names


def sample(registry: Registry, family: names.Family, suffix: str = "", **labels: str) -> float:
    value = registry.registry.get_sample_value(family.name + suffix, labels)
    assert value is not None, (family.name, labels)
    return value


@pytest.fixture
def trainer() -> tuple[Registry, TrainerMetrics]:
    registry = Registry(names.TRAINER)
    return registry, TrainerMetrics(registry, interval_steps=10)


def test_every_outcome_and_kind_is_served_at_zero_before_any_event(
    trainer: tuple[Registry, TrainerMetrics],
) -> None:
    registry, _ = trainer
    for outcome in names.FINAL_OUTCOMES:
        assert sample(registry, names.FINAL_SAVES, outcome=outcome) == 0
    for kind in names.SAVE_KINDS:
        assert sample(registry, names.SAVES, kind=kind) == 0
    for source in names.RESUME_SOURCES:
        assert sample(registry, names.RESUMES, checkpoint=source) == 0


def test_a_final_save_abandoned_at_its_deadline_is_late_and_loses_the_steps_since_the_last_commit(
    trainer: tuple[Registry, TrainerMetrics],
) -> None:
    registry, recorder = trainer
    recorder.observe({"event": "resumed", "step": 0})
    recorder.observe({"event": "checkpoint", "step": 20, "kind": "periodic", "seconds": 1.0})
    recorder.observe({"event": "preempted", "step": 27, "signal": "SIGTERM"})
    recorder.observe({"event": "final_save", "step": 27, "outcome": "late"})
    assert sample(registry, names.FINAL_SAVES, outcome="late") == 1
    assert sample(registry, names.FINAL_SAVES, outcome="committed") == 0
    assert sample(registry, names.STEPS_LOST) == 7


def test_a_final_save_the_store_refused_is_refused_not_late(
    trainer: tuple[Registry, TrainerMetrics],
) -> None:
    registry, recorder = trainer
    recorder.observe({"event": "resumed", "step": 10, "checkpoint": "periodic"})
    recorder.observe({"event": "preempted", "step": 13, "signal": "SIGTERM"})
    recorder.observe({"event": "final_save", "step": 13, "outcome": "refused"})
    assert sample(registry, names.FINAL_SAVES, outcome="refused") == 1
    assert sample(registry, names.STEPS_LOST) == 3


def test_the_harness_counts_lost_steps_itself_when_it_asks_the_recorder_not_to() -> None:
    registry = Registry(names.TRAINER)
    recorder = TrainerMetrics(registry, interval_steps=10, count_lost_steps=False)
    recorder.observe({"event": "preempted", "step": 5, "signal": "SIGTERM"})
    recorder.observe({"event": "final_save", "step": 5, "outcome": "late"})
    assert sample(registry, names.STEPS_LOST) == 0


def test_the_signal_counter_is_named_for_every_stop_signal_not_for_reclaims_alone() -> None:
    """A drain, a scale-down and a delete send the trainer the same SIGTERM as a reclaim."""
    assert names.STOP_SIGNALS.name == "spotproof_stop_signals_total"
    assert [family.name for family in names.ALL if "preempt" in family.name] == []


def test_a_drains_sigterm_counts_as_a_stop_signal(
    trainer: tuple[Registry, TrainerMetrics],
) -> None:
    registry, recorder = trainer
    recorder.observe({"event": "preempted", "step": 5, "signal": "SIGTERM"})
    assert sample(registry, names.STOP_SIGNALS) == 1


def test_a_rank_stopped_by_a_peers_notice_is_not_a_preemption_of_its_own(
    trainer: tuple[Registry, TrainerMetrics],
) -> None:
    registry, recorder = trainer
    recorder.observe({"event": "preempted", "step": 5, "signal": "a peer's"})
    recorder.observe({"event": "final_save", "step": 5, "outcome": "committed", "grace_left": 9})
    assert sample(registry, names.STOP_SIGNALS) == 0
    assert sample(registry, names.FINAL_SAVES, outcome="committed") == 1
    assert sample(registry, names.FINAL_SAVE_GRACE_LEFT, "_count") == 0


def test_the_save_at_the_end_of_training_is_no_final_save_on_leaving(
    trainer: tuple[Registry, TrainerMetrics],
) -> None:
    registry, recorder = trainer
    recorder.observe({"event": "checkpoint", "step": 100, "kind": "final", "seconds": 0.5})
    assert sample(registry, names.SAVES, kind="final") == 1
    assert sample(registry, names.FINAL_SAVES, outcome="committed") == 0
    assert sample(registry, names.LAST_COMMITTED_STEP) == 100


def test_the_grace_left_is_observed_when_the_processs_own_final_save_commits(
    trainer: tuple[Registry, TrainerMetrics],
) -> None:
    registry, recorder = trainer
    recorder.observe({"event": "preempted", "step": 5, "signal": "SIGTERM"})
    recorder.observe({"event": "final_save", "step": 5, "outcome": "committed", "grace_left": 9})
    assert sample(registry, names.FINAL_SAVE_GRACE_LEFT, "_sum") == 9
    assert sample(registry, names.FINAL_SAVES, outcome="committed") == 1


def test_only_the_rank_that_speaks_for_a_gang_counts_its_resume_and_its_final_save() -> None:
    registry = Registry(names.TRAINER)
    ranks = [TrainerMetrics(registry, 10, speaks_for_run=rank == 0) for rank in range(4)]
    for recorder in ranks:
        recorder.observe({"event": "resumed", "step": 20, "checkpoint": "final", "bytes": 10})
        recorder.observe({"event": "preempted", "step": 23, "signal": "SIGTERM"})
        recorder.observe({"event": "final_save", "step": 23, "outcome": "late"})
    assert sample(registry, names.RESUMES, checkpoint="final") == 1
    assert sample(registry, names.FINAL_SAVES, outcome="late") == 1
    assert sample(registry, names.STEPS_LOST) == 3
    assert sample(registry, names.STOP_SIGNALS) == 4
    assert sample(registry, names.RESTORE_BYTES) == 40


def test_a_checkpoint_saved_before_kinds_were_recorded_is_no_resume_of_either_kind(
    trainer: tuple[Registry, TrainerMetrics],
) -> None:
    registry, recorder = trainer
    recorder.observe({"event": "resumed", "step": 40, "checkpoint": "unknown", "bytes": 8})
    assert sum(sample(registry, names.RESUMES, checkpoint=s) for s in names.RESUME_SOURCES) == 0
    assert sample(registry, names.LAST_COMMITTED_STEP) == 40
    assert sample(registry, names.RESTORE_BYTES) == 8


def test_a_fresh_start_is_no_resume(trainer: tuple[Registry, TrainerMetrics]) -> None:
    registry, recorder = trainer
    recorder.observe({"event": "resumed", "step": 0})
    assert sum(sample(registry, names.RESUMES, checkpoint=s) for s in names.RESUME_SOURCES) == 0
    assert sample(registry, names.RESTORE_SECONDS, "_count") == 0


def test_a_step_stamps_when_training_last_advanced(
    trainer: tuple[Registry, TrainerMetrics], monkeypatch: pytest.MonkeyPatch
) -> None:
    registry, recorder = trainer
    monkeypatch.setattr("time.time", lambda: 1_700_000_060.0)
    recorder.observe({"event": "step", "step": 7})
    assert sample(registry, names.LAST_STEP_TIME) == 1_700_000_060.0


def test_a_resume_starts_the_clock_a_stalled_trainer_is_judged_by(
    trainer: tuple[Registry, TrainerMetrics], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trainer that hangs right after restoring is stalled from its resume on."""
    registry, recorder = trainer
    monkeypatch.setattr("time.time", lambda: 1_700_000_000.0)
    recorder.observe({"event": "resumed", "step": 40, "checkpoint": "final"})
    assert sample(registry, names.LAST_STEP_TIME) == 1_700_000_000.0


def test_the_expected_interval_is_the_mean_step_time_times_the_interval(
    trainer: tuple[Registry, TrainerMetrics], monkeypatch: pytest.MonkeyPatch
) -> None:
    registry, recorder = trainer
    clock = iter([100.0, 100.5, 101.0])
    monkeypatch.setattr("spotproof.runtime.metrics.recorders.time.monotonic", lambda: next(clock))
    for step in (1, 2, 3):
        recorder.observe({"event": "step", "step": step})
    assert sample(registry, names.INTERVAL_SECONDS) == pytest.approx(5.0)
    assert sample(registry, names.STEPS) == 3
    assert sample(registry, names.INTERVAL_STEPS) == 10


@pytest.fixture
def worker() -> tuple[Registry, WorkerMetrics]:
    registry = Registry(names.BATCH)
    return registry, WorkerMetrics(registry)


def test_a_worker_holds_what_it_leased_until_each_item_ends(
    worker: tuple[Registry, WorkerMetrics],
) -> None:
    registry, recorder = worker
    recorder.observe({"event": "leased", "ids": ["a", "b", "c", "d"]})
    recorder.observe({"event": "done", "id": "a", "seconds": 0.2})
    recorder.observe({"event": "already_done", "id": "b"})
    assert sample(registry, names.ITEMS_IN_FLIGHT) == 2
    recorder.observe({"event": "handed_back", "ids": ["c", "d"]})
    assert sample(registry, names.ITEMS_IN_FLIGHT) == 0
    assert sample(registry, names.ITEMS_LEASED) == 4
    assert sample(registry, names.ITEMS_DONE) == 1
    assert sample(registry, names.ITEMS_ALREADY_DONE) == 1
    assert sample(registry, names.ITEMS_HANDED_BACK) == 2
    assert sample(registry, names.ITEM_SECONDS, "_sum") == pytest.approx(0.2)


def test_failures_and_malformed_messages_on_their_last_delivery_are_dead_letters(
    worker: tuple[Registry, WorkerMetrics],
) -> None:
    registry, recorder = worker
    recorder.observe({"event": "leased", "ids": ["a"]})
    recorder.observe({"event": "failed", "id": "a", "dead_lettered": False})
    recorder.observe({"event": "leased", "ids": ["a"]})
    recorder.observe({"event": "failed", "id": "a", "dead_lettered": True})
    recorder.observe({"event": "rejected", "message": "m", "dead_lettered": True})
    assert sample(registry, names.ITEMS_FAILED) == 2
    assert sample(registry, names.ITEMS_DEAD_LETTERED) == 2
    assert sample(registry, names.ITEMS_IN_FLIGHT) == 0


def test_workers_sharing_one_registry_add_up_what_they_hold() -> None:
    registry = Registry(names.BATCH)
    first, second = WorkerMetrics(registry), WorkerMetrics(registry)
    first.observe({"event": "leased", "ids": ["a", "b"]})
    second.observe({"event": "leased", "ids": ["c", "d", "e"]})
    first.observe({"event": "done", "id": "a", "seconds": 0.1})
    assert sample(registry, names.ITEMS_IN_FLIGHT) == 4
    second.observe({"event": "progress", "in_flight": 1})
    assert sample(registry, names.ITEMS_IN_FLIGHT) == 2


def test_a_worker_that_is_gone_holds_nothing_in_a_shared_registry() -> None:
    registry = Registry(names.BATCH)
    killed, alive = WorkerMetrics(registry), WorkerMetrics(registry)
    killed.observe({"event": "leased", "ids": ["a", "b"]})
    alive.observe({"event": "leased", "ids": ["c"]})
    killed.gone()
    assert sample(registry, names.ITEMS_IN_FLIGHT) == 1


def test_a_progress_line_sets_what_the_worker_holds(worker: tuple[Registry, WorkerMetrics]) -> None:
    registry, recorder = worker
    recorder.observe({"event": "leased", "ids": ["a", "b"]})
    recorder.observe({"event": "progress", "in_flight": 1})
    assert sample(registry, names.ITEMS_IN_FLIGHT) == 1


def test_a_resume_read_from_memory_is_never_counted_as_the_newest_committed_step(
    trainer: tuple[Registry, TrainerMetrics],
) -> None:
    registry, recorder = trainer
    recorder.observe({"event": "resumed", "step": 30, "checkpoint": "periodic", "tier": "bucket"})
    recorder.observe({"event": "resumed", "step": 50, "checkpoint": "periodic", "tier": "peer"})
    assert sample(registry, names.LAST_COMMITTED_STEP) == 30
    assert sample(registry, names.RESUMES, checkpoint="periodic") == 2
