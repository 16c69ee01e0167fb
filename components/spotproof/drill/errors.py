"""Why a drill stops before it judges anything: each is one line for the person running it.

``DrillRefused`` and ``GrantMissing`` are the drill declining to act (exit 2, as for any bad
input: nothing was reclaimed); ``StageTimedOut`` is a bounded wait that ran out after the
drill had started (exit 1: the cluster did not do what a recovery needs in time).
"""

from __future__ import annotations


class DrillError(Exception):
    """A drill that cannot go on; ``str()`` is the one line to print."""


class DrillRefused(DrillError):
    """The drill will not reclaim this: a protected stack without ``--yes``, an instance
    that is not spot or not in this cluster, input that names nothing to drill."""


class GrantMissing(DrillError):
    """The caller lacks the permission the drill needs; the message names the grant and
    how the stack gives it (``drill.enabled``)."""


class StageTimedOut(DrillError):
    """A stage's bounded wait ran out; the message names the stage and what it waited for."""
