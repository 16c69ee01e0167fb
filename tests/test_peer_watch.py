"""A gang's watch over its ranks (``runtime.liveness``) and what a rank does with it when
its main thread is blocked in a collective whose peer will never answer."""

from __future__ import annotations

import datetime
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from spotproof.runtime import exit_codes
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.liveness import PeerWatch
from spotproof.smoke.emulation.object_stores import free_port
from spotproof.smoke.processes.trainer_process import TrainerProcess


class Store:
    """A gang's store as the watch uses it: counters by key; ``answering`` False makes
    every request fail as a TCPStore whose host is gone does."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.answering = True

    def add(self, key: str, value: int) -> int:
        if not self.answering:
            raise RuntimeError("Connection reset by peer")
        self.counters[key] = self.counters.get(key, 0) + value
        return self.counters[key]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def gang(store: Store, clock: Clock, size: int = 3, silence: float = 10) -> list[PeerWatch]:
    return [
        PeerWatch(store, gang="g1", rank=r, world_size=size, silence=silence, clock=clock)
        for r in range(size)
    ]


def rounds(watches: list[PeerWatch], clock: Clock, seconds: float) -> None:
    """Every watch looks once a second for ``seconds``."""
    for _ in range(int(seconds)):
        clock.now += 1
        for watch in watches:
            watch.look()


def test_ranks_that_keep_beating_are_never_lost() -> None:
    store, clock = Store(), Clock()
    watches = gang(store, clock)
    rounds(watches, clock, 60)
    assert [w.lost for w in watches] == [None, None, None]


def test_a_rank_that_stops_beating_is_lost_by_its_watcher_after_the_silence() -> None:
    store, clock = Store(), Clock()
    first, second, third = gang(store, clock)
    rounds([first, second, third], clock, 3)
    # The third is gone: its watcher, the second, last saw it move in the round after
    # its last beat.
    rounds([first, second], clock, 10)
    assert second.lost is None
    rounds([first, second], clock, 1)
    assert second.lost == "rank 2 has not been heard from for 10 s"


def test_every_rank_learns_of_a_loss_within_a_beat_of_its_watcher() -> None:
    store, clock = Store(), Clock()
    first, second, third = gang(store, clock)
    rounds([first, second, third], clock, 3)
    rounds([first, second], clock, 11)
    assert second.lost is not None and first.lost is None
    rounds([first, second], clock, 1)
    assert first.lost == "another rank of the gang found a peer lost"


def test_a_rank_that_left_with_its_gang_is_not_lost() -> None:
    store, clock = Store(), Clock()
    first, second, third = gang(store, clock)
    rounds([first, second, third], clock, 3)
    third.stop(announce=True)
    rounds([first, second], clock, 60)
    assert [first.lost, second.lost] == [None, None]


def test_a_rank_that_left_alone_is_lost_like_a_vanished_one() -> None:
    """A store failing on that rank only, say: its gang must stop, not wait in a collective."""
    store, clock = Store(), Clock()
    first, second, third = gang(store, clock)
    rounds([first, second, third], clock, 3)
    third.stop(announce=False)
    rounds([first, second], clock, 11)
    assert second.lost == "rank 2 has not been heard from for 10 s"


def test_a_rank_leaving_does_not_wait_out_a_store_that_stopped_answering() -> None:
    class Stuck(Store):
        def add(self, key: str, value: int) -> int:
            time.sleep(30)  # a store whose host vanished without a reset
            return 0

    watch = PeerWatch(Stuck(), gang="g1", rank=0, world_size=2, silence=10)
    started = time.monotonic()
    watch.stop(announce=True)
    assert time.monotonic() - started < 2


def test_a_store_that_stops_answering_is_a_loss_after_the_silence() -> None:
    store, clock = Store(), Clock()
    watches = gang(store, clock, size=2)
    rounds(watches, clock, 3)
    store.answering = False  # the store's host (rank 0's, or torchrun's agent's) is gone
    rounds(watches, clock, 9)
    assert [w.lost for w in watches] == [None, None]
    rounds(watches, clock, 1)
    assert all(w.lost and "store has not answered for 10 s" in w.lost for w in watches)


def test_the_watch_thread_reports_a_loss_once_over_a_real_tcpstore() -> None:
    import torch.distributed as dist  # noqa: PLC0415

    from spotproof.runtime import liveness  # noqa: PLC0415

    port = free_port()
    server = dist.TCPStore(
        "127.0.0.1", port, is_master=True, timeout=datetime.timedelta(seconds=10)
    )
    watches = [
        PeerWatch(
            liveness.connect("127.0.0.1", port),
            gang="g2",
            rank=r,
            world_size=2,
            silence=1.0,
            beat=0.1,
        )
        for r in (0, 1)
    ]
    heard: list[str] = []
    watches[0].start(heard.append)
    time.sleep(2)  # rank 1 never beats
    assert heard == ["rank 1 has not been heard from for 1 s"]
    del server


def test_the_guard_learns_of_a_signal_from_the_interpreter_not_only_its_handler() -> None:
    """The byte CPython's C handler writes the moment SIGTERM arrives, while the main
    thread may still be blocked where no Python handler runs, is seen by a waiter."""
    guard = PreemptionGuard(30)
    with guard:
        ours = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(ours)
        assert ours == guard._wake_write
        os.write(ours, bytes([signal.SIGTERM]))  # as the interpreter's handler does
        assert guard.wait(1)
        assert guard.signal_received == signal.SIGTERM and guard.remaining() <= 30
    assert signal.set_wakeup_fd(-1) == -1  # given back on leaving


def test_the_guard_leaves_a_programs_own_wakeup_fd_alone() -> None:
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write)
    try:
        with PreemptionGuard(30):
            assert signal.set_wakeup_fd(write) == write
        assert signal.set_wakeup_fd(-1) == write
    finally:
        os.close(read)
        os.close(write)


def test_a_forked_child_does_not_wake_its_parents_guard() -> None:
    """A data loader's or a pool's worker, forked from inside the guard, stopped with
    SIGTERM: its interpreter must not write that signal into the parent's pipe."""
    guard = PreemptionGuard(30)
    with guard:
        child = os.fork()
        if child == 0:  # the child: no guard of its own, Python's default SIGTERM
            signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
            time.sleep(30)
            os._exit(1)
        time.sleep(0.5)  # the child's at-fork handler has run
        os.kill(child, signal.SIGTERM)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert not guard.wait(0.5)
        assert not guard.preempted


def test_another_signal_on_the_wakeup_fd_is_not_a_preemption() -> None:
    guard = PreemptionGuard(30)
    with guard:
        os.write(guard._wake_write, bytes([signal.SIGCHLD]))
        assert not guard.wait(0.3)
        assert not guard.preempted


TRAINER = textwrap.dedent(
    """
    import os, signal, torch
    from spotproof import training

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with training(model=model, optimizer=optimizer) as run:
        for step in run.steps(100_000):
            if run.rank == 1 and step == 5:  # its node stops answering: no error, no beat
                os.kill(os.getpid(), signal.SIGSTOP)
            loss = model(torch.ones(2, 4)).sum()
            optimizer.zero_grad()
            loss.backward()
            for parameter in model.parameters():  # the trainer's own collective
                torch.distributed.all_reduce(parameter.grad)
            optimizer.step()
    """
)


@pytest.mark.processes
def test_a_rank_blocked_in_its_own_collective_with_a_silent_peer_waits_to_be_torn_down(
    tmp_path: Path,
) -> None:
    """Rank 1 stops at step 5 (a node gone quiet: its connections stay open, so rank 0's
    all_reduce raises nothing and would wait out the group's ten minutes). Rank 0's watch
    finds rank 1 silent, and rank 0 waits to be torn down, then leaves at once on SIGTERM
    with the lost peer's code, though its main thread never left the collective."""
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    env = {
        "CHECKPOINT_URL": f"file://{tmp_path}/ckpt",
        "CHECKPOINT_INTERVAL": "1000",
        "GRACE_SECONDS": "60",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "PEER_SILENCE_SECONDS": "3",
    }
    origin = time.monotonic()
    ranks = [
        TrainerProcess(
            {**env, "RANK": str(rank)},
            origin,
            index=rank,
            argv=[sys.executable, str(script)],
            events_file=tmp_path / f"rank{rank}.jsonl",
        )
        for rank in (0, 1)
    ]
    try:
        assert ranks[0].wait_for(lambda e: e["event"] == "resumed", 120) is not None
        waiting = ranks[0].wait_for(lambda e: e["event"] == "awaiting_teardown", 60)
        assert waiting is not None, ranks[0].stderr[-5:]
        [lost] = ranks[0].of("peer_lost")
        assert "rank 1 has not been heard from for 3 s" in lost["reason"]
        assert lost["by"] == "watch"  # the main thread never left the all_reduce
        torn_down = ranks[0].now()
        ranks[0].send(signal.SIGTERM)  # the JobSet deletes the survivor's pod
        assert ranks[0].finish(timeout=30) == exit_codes.PEER_LOST  # torn down, not killed
        assert ranks[0].now() - torn_down < 10  # not the grace: nothing waited it out
    finally:
        for rank in ranks:
            rank.send(signal.SIGKILL)
            rank.finish()
