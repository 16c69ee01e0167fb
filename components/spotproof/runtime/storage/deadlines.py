"""How long a storage call may take before the runtime gives up on it.

Left to their defaults the SDKs wait minutes on an endpoint that accepts connections and
never answers: botocore 60 s per read, times s3fs's 5 tries of botocore's own attempts;
azure-core 300 s per read; gcsfs 6 tries of requests without a timeout. A trainer
pointed at such an endpoint sat more than 7 minutes in start-up. So:

- every SDK gets a connect timeout, a read timeout (the longest silence on an open
  connection, not the length of a transfer) and a bounded number of tries
  (each backend's ``call_limits`` and ``sdk_retries`` in ``backends``, and ``S3Store``'s
  own botocore client);
- opening a store checks it within :data:`STARTUP_SECONDS` as a whole (:func:`within`),
  whatever the SDK's retries add up to: a pod that cannot reach its store exits for a
  retry (``STORAGE_UNAVAILABLE``) instead of hanging;
- a final save on preemption gets the grace period as its deadline
  (``AsyncCheckpointer.save_final``), so it is abandoned between parts, with the previous
  checkpoint intact, rather than cut off by the kill.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from spotproof.runtime import settings
from spotproof.runtime.failures import Failure
from spotproof.runtime.storage.errors import StorageError

T = TypeVar("T")

CONNECT_SECONDS = 5
"""A TCP (and TLS) connection to a store's endpoint: in-region endpoints answer in
milliseconds, so 5 s means it is not going to."""
READ_SECONDS = 20
"""The longest silence on an open connection before the call is retried."""
ATTEMPTS = 3
"""Tries of one call, the first included."""
STARTUP_SECONDS = settings.STORAGE_STARTUP_SECONDS.default
"""Opening a store, reachability check included; ``STORAGE_STARTUP_SECONDS`` overrides."""


def startup_seconds() -> float:
    """``STORAGE_STARTUP_SECONDS``, read leniently: any process may open a store, and only
    the trainer checks the variable strictly (``TrainConfig.from_env``)."""
    raw = os.environ.get(settings.STORAGE_STARTUP_SECONDS.name, "")
    try:
        value = float(raw) if raw else STARTUP_SECONDS
    except ValueError:
        value = STARTUP_SECONDS
    return value if 0 < value < float("inf") else STARTUP_SECONDS


def botocore_config() -> dict[str, Any]:
    """``botocore.config.Config`` arguments for every S3 client the runtime makes."""
    return {
        "connect_timeout": CONNECT_SECONDS,
        "read_timeout": READ_SECONDS,
        "retries": {"mode": "standard", "max_attempts": ATTEMPTS},
    }


def within(seconds: float, what: str, call: Callable[[], T]) -> T:
    """``call()``'s result, or :class:`StorageError` if it has not returned in ``seconds``.

    The call runs in a daemon thread that is left behind on a timeout: an SDK call cannot
    be interrupted from outside, and the caller is about to report the store unreachable
    and exit anyway."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # handed to the caller's thread below
            outcome["error"] = error

    worker = threading.Thread(target=run, name=f"storage: {what}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise StorageError(f"{what}: no answer within {seconds:g} s", Failure.UNREACHABLE)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
