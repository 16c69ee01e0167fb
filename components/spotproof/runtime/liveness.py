"""Knowing that a rank of the gang is gone while this one is blocked in a collective.

A rank learns of a lost peer from a collective that fails (``runtime.group.PeerLost``).
That is not always prompt, and sometimes never comes before the process group's timeout
(``RENDEZVOUS_SECONDS``, ten minutes by default):

- NCCL does not notice a vanished peer: a collective runs until the group's timeout,
  then torch's watchdog tears the process down (``TORCH_NCCL_ASYNC_ERROR_HANDLING``,
  default 3, https://pytorch.org/docs/stable/torch_nccl_environment_variables.html), a
  crash to the Job's failure policy, ten minutes late.
- gloo (torch 2.13) mostly raises "Connection closed by peer" at once, but not always:
  measured here, a rank held (SIGSTOP) while its peer was killed and then let go waited
  out the whole timeout in 5 runs of 10 ("Timed out" from gloo's
  ``transport/tcp/unbound_buffer.cc``), though it raised at once in 12 of 12 runs where
  it kept running. A busy node's scheduler can hold a rank just the same.

Blocked in C++, the rank cannot run its SIGTERM handler either, so the teardown that
follows costs the pod its whole grace period, and a rank that waits out the timeout fails
on its own, later than the lost rank's Job, which is what a JobSet's failure policy must
see first (``runtime.checkpointer.gang``, "Stopping because of a peer").

The watch
---------
Every rank beats on the gang's own store (the TCPStore at ``MASTER_ADDR:MASTER_PORT``
that torchrun or rank 0 serves, through a client of its own with a short timeout) every
:data:`BEAT_SECONDS`, and watches one neighbour: rank ``r`` watches ``r + 1`` (the last
watches rank 0), so each rank's loss is seen by exactly one other and the store answers
three requests a second per rank, whatever the size of the gang, and holds a counter per
rank and one verdict. A neighbour whose beat
has not moved for ``PEER_SILENCE_SECONDS``, or a store that has not answered for as long
(its host is gone), is a lost peer: the watcher records it under the gang's ``lost`` key,
which every rank reads each beat, so the whole gang learns of it within a beat. A rank
that leaves with its gang (done, or stopped together) says so first, and is not mistaken
for a lost one; a rank that leaves alone (a store failing on it only, say) is silent, as a
lost one is. Every rank of the gang watches, or none does: ranks agree on it as they join.

What a rank does with it is ``runtime.leaving``'s: the main thread, at its next
collective, leaves as a rank stopped by a peer; a main thread still blocked a few seconds
later is left where it is, and the watch thread takes that way out for it.

A false alarm (a live rank whose threads got no CPU for the whole silence) stops the
gang, which resumes from its newest checkpoint: a restart, never a corrupt state.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

BEAT_SECONDS = 1.0
"""How often a rank beats and looks at its neighbour's beat and the gang's verdict."""
STORE_TIMEOUT_SECONDS = 5.0
"""How long one request to the store may take before it counts as unanswered."""
ANNOUNCE_SECONDS = 1.0
"""How long a rank leaving with its gang waits to have said so; a leaving rank never waits
out a store that has stopped answering."""
LEFT = 1 << 40
"""Added to a rank's beat when it leaves with its gang: a beat this high is a rank gone
on purpose (one counter per rank says both)."""


class BeatStore(Protocol):
    """What the watch needs of a ``torch.distributed.Store``."""

    def add(self, key: str, value: int) -> int: ...


def connect(host: str, port: int) -> BeatStore:
    """A client of its own to the gang's TCPStore: the process group's client may be busy
    inside a collective's set-up, and its timeout is the group's."""
    import torch.distributed as dist  # noqa: PLC0415

    return dist.TCPStore(
        host,
        port,
        is_master=False,
        timeout=datetime.timedelta(seconds=STORE_TIMEOUT_SECONDS),
        wait_for_workers=False,
    )


class PeerWatch:
    """Rank ``rank`` of ``world_size`` in gang ``gang``: beats, and watches its neighbour.

    ``silence``: seconds without a neighbour's beat (or an answer from the store) before
    the neighbour is lost. :meth:`look` is one round; :meth:`start` runs rounds every
    ``beat`` seconds in a daemon thread and calls ``on_lost(reason)`` once, from that
    thread, when a loss is first known."""

    def __init__(
        self,
        store: BeatStore,
        *,
        gang: str,
        rank: int,
        world_size: int,
        silence: float,
        beat: float = BEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.silence, self.beat, self.clock = silence, beat, clock
        self.neighbour = (rank + 1) % world_size
        self._prefix = f"spotproof/peers/{gang}"
        self.lost: str | None = None
        """Why the gang is known to have lost a rank; None while it has not."""
        self._seen = (-1, clock())
        """The neighbour's beat last read, and when it last moved."""
        self._answered = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _key(self, *parts: object) -> str:
        return "/".join([self._prefix, *map(str, parts)])

    def look(self) -> str | None:
        """One round: beat, read the gang's verdict, judge the neighbour; the reason a
        rank is lost once it is known."""
        if self.lost is not None:
            return self.lost
        now = self.clock()
        try:
            self.store.add(self._key("beat", self.rank), 1)
            if self.store.add(self._key("lost"), 0) > 0:
                self.lost = "another rank of the gang found a peer lost"
                return self.lost
            beat = self.store.add(self._key("beat", self.neighbour), 0)
        except Exception as error:  # torch raises its own errors for a store gone quiet
            if now - self._answered >= self.silence:
                self.lost = (
                    f"the gang's store has not answered for {self.silence:g} s "
                    f"(its host is gone?): {str(error).strip().splitlines()[0][:120]}"
                )
            return self.lost
        self._answered = now
        if beat >= LEFT:
            return None
        last, moved_at = self._seen
        if beat != last:
            self._seen = (beat, now)
        elif now - moved_at >= self.silence:
            self.lost = f"rank {self.neighbour} has not been heard from for {self.silence:g} s"
            _quietly(lambda: self.store.add(self._key("lost"), 1))
        return self.lost

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def start(self, on_lost: Callable[[str], None]) -> None:
        def watch() -> None:
            while not self._stop.wait(self.beat):
                reason = self.look()
                if reason is not None and not self._stop.is_set():
                    on_lost(reason)
                    return

        self._thread = threading.Thread(target=watch, name="spotproof-peer-watch", daemon=True)
        self._thread.start()

    def stop(self, *, announce: bool) -> None:
        """Stop watching; ``announce``: this rank leaves with the gang's agreement (done, or
        stopped together), so the rank watching it must not take it for lost. A rank
        leaving alone (a store or a setting failing on it only) does not announce: its
        silence is how the others learn of it. The announcement is bounded by
        :data:`ANNOUNCE_SECONDS`, queued as it may be behind a watch request to a store
        that has stopped answering."""
        self._stop.set()
        if not announce or self.lost is not None:
            return
        telling = threading.Thread(
            target=_quietly,
            args=(lambda: self.store.add(self._key("beat", self.rank), LEFT),),
            name="spotproof-peer-left",
            daemon=True,
        )
        telling.start()
        telling.join(ANNOUNCE_SECONDS)


def _quietly(call: Callable[[], Any]) -> None:
    """Best effort: a store that does not answer is what a watcher reports, not a crash."""
    with contextlib.suppress(Exception):  # torch raises its own errors for a quiet store
        call()
