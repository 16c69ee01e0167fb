"""The storage layer's errors: one line each, their kind decided by exception type."""

from __future__ import annotations

from spotproof.runtime.failures import Failure, classify
from spotproof.runtime.messages import redacted


class StorageError(RuntimeError):
    """The store cannot be used: bad URL, no credentials, unreachable, or a failed call."""

    def __init__(self, message: str, failure: Failure = Failure.OTHER) -> None:
        super().__init__(redacted(message))  # URLs and SDK errors may carry credentials
        self.failure = failure


class StorageURLError(StorageError):
    """The URL itself is wrong: retrying cannot help."""


class AlreadyExists(Exception):
    """A create-only write found the object already there."""


class Unreadable(ValueError):
    """An object a checkpoint must not be read from: a key outside the store, a link or a
    special file where an object belongs, or more bytes than its format allows. A loader
    skips the checkpoint that names it, as it skips a corrupt one."""


def failed(url: str, what: str, error: BaseException) -> StorageError:
    """``error`` from an SDK as one line: the kind of failure, then the SDK's own words."""
    failure = classify(error)
    text = " ".join(str(error).split()) or type(error).__name__
    if failure is Failure.OTHER:
        described = f"{type(error).__name__}: {text[:200]}"
    else:
        described = f"{failure.value} ({text[:200]})"
    return StorageError(f"{url}: {what} failed: {described}", failure)
