"""Settings that build, but that a real preemption may not honour: warnings, not errors.

Two are checked: a final save that may not fit the grace period, and, in production, an
image pinned by tag rather than digest.

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
from spotproof.spec import images as images_module
from spotproof.spec.types import FleetSpec


@dataclass(frozen=True)
class SpecWarning:
    key: str
    """The config key the warning is about, e.g. ``spotproof:smokeTest.modelMb``."""
    message: str


def warnings(spec: FleetSpec) -> list[SpecWarning]:
    return [*_final_save_fits(spec), *_images_pinned(spec)]


def _images_pinned(spec: FleetSpec) -> list[SpecWarning]:
    """In production, an image by tag: a re-pushed tag changes what the next pod runs,
    even for a run resuming its own checkpoint (``spec.images``)."""
    if not spec.protect:
        return []
    images = [
        ("spotproof:smokeTest.image", spec.smoke_test.image if spec.smoke_test else None),
        ("spotproof:batch.image", spec.batch.image if spec.batch else None),
    ]
    return [
        SpecWarning(
            key,
            f"{image} is pinned by tag; in production pin the digest ({image.split('@')[0]}"
            "@sha256:...) so a re-pushed tag cannot change what a resumed run executes",
        )
        for key, image in images
        if image is not None and (parsed := images_module.parse(image)) and not parsed.digest
    ]


def _final_save_fits(spec: FleetSpec) -> list[SpecWarning]:
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
