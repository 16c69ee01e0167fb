"""GCP names: service account ids within GCP's limits, and IAM member strings."""

from __future__ import annotations

import hashlib

import pulumi


def service_account_id(stack: str, purpose: str) -> str:
    """A service account id (6-30 chars) for ``purpose`` in ``stack``, readable when it fits,
    shortened with a stable hash of the full name when it does not."""
    full = f"{stack}-{purpose}"
    if len(full) <= 30:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:6]
    room = 30 - len(purpose) - len(digest) - 2
    return f"{stack[:room].rstrip('-')}-{digest}-{purpose}"


def service_account_member(email: pulumi.Output[str]) -> pulumi.Output[str]:
    """The IAM member string for a Google service account."""
    return email.apply(lambda address: f"serviceAccount:{address}")
