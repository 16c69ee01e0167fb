"""The replica server's room: what its served directory holds, against its limit.

A separate module because both ends of a request use it: the server makes it
(``replica_server``) and each write takes its bytes from it before the body is read
(``replica_requests``).
"""

from __future__ import annotations

import contextlib
import os
import threading

PAGE = 4096
"""The least a file takes in a tmpfs."""


def default_limit(directory: str) -> int:
    """Half the file system ``directory`` is on: a memory-backed ``emptyDir`` is a tmpfs
    as large as its ``sizeLimit``, which ``spotproof plan`` wants at six copies of the
    state, three of them its peer's (``plan.simulation.memory_tiers``)."""
    found = os.statvfs(directory)
    return found.f_blocks * found.f_frsize // 2


class Room:
    """What the served directory holds, against its limit. ``used`` is an upper bound:
    a delete, here or by the trainer itself, is seen when a write would not fit, by
    measuring again."""

    def __init__(self, root: str, limit: int) -> None:
        self.root, self.limit = root, limit
        self.used, self.arriving = self._measure(), 0
        self._lock = threading.Lock()

    def _measure(self) -> int:
        total = 0
        for folder, directories, files in os.walk(self.root):
            total += PAGE * len(directories)
            for name in files:
                with contextlib.suppress(FileNotFoundError):
                    total += max(PAGE, os.lstat(os.path.join(folder, name)).st_size)
        return total

    def take(self, size: int) -> bool:
        """Whether ``size`` more bytes fit; if so they are counted as arriving."""
        charge = max(PAGE, size)
        with self._lock:
            if self.used + self.arriving + charge > self.limit:
                self.used = self._measure()
            if self.used + self.arriving + charge > self.limit:
                return False
            self.arriving += charge
            return True

    def arrived(self, size: int, stored: bool) -> None:
        charge = max(PAGE, size)
        with self._lock:
            self.arriving -= charge
            self.used += charge if stored else 0
