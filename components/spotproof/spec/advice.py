"""Settings that build, but that a real preemption may not honour: warnings, not errors.

A stack whose smoke Job holds more state than its final save can commit within the grace
period loses the steps since the last periodic checkpoint on every reclaim, silently. The
plan says so, naming the key, at the commit rate ``benchmarks/capacity.py`` measured
(:data:`spotproof.catalog.FINAL_SAVE_MIB_PER_SECOND`). That rate is a floor from a small
machine and an emulator; a GPU node's network to its region's bucket is usually faster,
which is why this warns rather than refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotproof.catalog import FINAL_SAVE_MIB_PER_SECOND
from spotproof.spec.types import FleetSpec


@dataclass(frozen=True)
class SpecWarning:
    key: str
    """The config key the warning is about, e.g. ``spotproof:smokeTest.modelMb``."""
    message: str


def warnings(spec: FleetSpec) -> list[SpecWarning]:
    smoke = spec.smoke_test
    if smoke is None or smoke.grace_period_seconds is None:
        return []
    needed = smoke.model_mb / FINAL_SAVE_MIB_PER_SECOND
    if needed <= smoke.grace_period_seconds:
        return []
    fits = int(FINAL_SAVE_MIB_PER_SECOND * smoke.grace_period_seconds)
    return [
        SpecWarning(
            "spotproof:smokeTest.modelMb",
            f"{smoke.model_mb} MiB of state needs ~{needed:.0f} s to commit at the measured "
            f"{FINAL_SAVE_MIB_PER_SECOND} MiB/s, more than the {smoke.grace_period_seconds} s "
            f"grace period on {spec.cloud.value.upper()}: a reclaim would lose the steps since "
            f"the last periodic checkpoint; ~{fits} MiB fits",
        )
    ]
