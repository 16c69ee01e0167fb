"""GCP resource names that must fit GCP's length limits."""

from __future__ import annotations

import hashlib


def service_account_id(stack: str, purpose: str) -> str:
    """A service account id (6-30 chars) for ``purpose`` in ``stack``, readable when it fits,
    shortened with a stable hash of the full name when it does not."""
    full = f"{stack}-{purpose}"
    if len(full) <= 30:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:6]
    room = 30 - len(purpose) - len(digest) - 2
    return f"{stack[:room].rstrip('-')}-{digest}-{purpose}"
