"""Why an interrupted run did not end where the uninterrupted one did: the part of the state
that differs, from which save on, and what that usually means.

Every process of a rehearsed command saves with ``SPOTPROOF_STATE_DIGESTS=1``, so each
committed manifest carries one digest per part of the state it holds (``model``,
``optimizer``, ``rng`` and every other object handed to ``training()`` by name:
``runtime.checkpointer.fingerprint``), and every save is kept. Comparing two runs' saves
at the steps both committed finds the first save where each part parts ways; set against
the steps the interrupted run resumed from, that says which resume lost it.

The two runs must be comparable at all: when their final digests differ a second
uninterrupted run is made, and if the two uninterrupted runs differ too the trainer is not
deterministic, which is said instead (and the parts that differ between them), since no
resume is then to blame.

One cause is common enough to name outright: a learning-rate scheduler that drives the
optimizer but is not handed to ``training()``. Its param groups then carry ``initial_lr``
(every ``torch.optim.lr_scheduler`` scheduler sets it), while no checkpoint holds a
scheduler's state, and a resumed run starts the schedule over.
"""

from __future__ import annotations

from collections.abc import Mapping

from spotproof.runtime.checkpointer.fingerprint import differing
from spotproof.runtime.checkpointer.layout import MANIFESTS, committed_step, manifest_key
from spotproof.runtime.checkpointer.manifest import MAX_MANIFEST_BYTES, ManifestError, read_commit
from spotproof.runtime.storage import ObjectStore, StorageError

Saves = dict[int, dict[str, str]]
"""Each committed step's digest of each part of the state."""
ORDER = ("optimizer", "model", "rng")
"""Of parts that first differ at the same save, the one named as the cause first: an
optimizer's state shapes the next update, which then shapes the model."""


def saves_of(store: ObjectStore) -> Saves:
    """The ``states`` of every committed save under ``store``'s prefix."""
    found: Saves = {}
    for name in store.list(MANIFESTS):
        step = committed_step(name)
        if step is None:
            continue
        try:
            commit = read_commit(store.get(manifest_key(step), limit=MAX_MANIFEST_BYTES))
        except (ManifestError, FileNotFoundError, StorageError):
            continue
        states = commit.metadata.get("states")
        if isinstance(states, Mapping):
            found[step] = {str(part): str(digest) for part, digest in states.items()}
    return found


def first_differences(ours: Saves, theirs: Saves) -> dict[str, int]:
    """Each part that differs at some step both runs saved, and the first such step."""
    found: dict[str, int] = {}
    for step in sorted(set(ours) & set(theirs)):
        for part in differing(ours[step], theirs[step]):
            found.setdefault(part, step)
    return found


def lr_scheduler_unsaved(store: ObjectStore, step: int) -> bool:
    """Whether the checkpoint of ``step`` shows an LR scheduler driving the optimizer (its
    param groups carry ``initial_lr``) but holds no scheduler's state; False when it
    cannot tell."""
    from spotproof.runtime.checkpointer.torch_state import read_header  # noqa: PLC0415 - torch

    try:
        shard = read_commit(store.get(manifest_key(step), limit=MAX_MANIFEST_BYTES)).shards[0]
        parts = sorted((p for p in shard.parts if p.blob == "skeleton"), key=lambda p: p.index)
        data = b"".join(store.get(part.key) for part in parts)
        skeleton, _ = read_header(data, shard.blob_sizes.get("tensors", 0))
    except (ManifestError, FileNotFoundError, StorageError, ValueError):
        return False
    if not isinstance(skeleton, Mapping):
        return False
    optimizer = skeleton.get("optimizer") or {}
    groups = (optimizer.get("param_groups") or []) if isinstance(optimizer, Mapping) else []
    driven = any(isinstance(g, Mapping) and "initial_lr" in g for g in groups)
    extra = skeleton.get("extra") or {}
    held = any(
        isinstance(state, Mapping) and {"base_lrs", "last_epoch"} <= set(state)
        for state in (extra.values() if isinstance(extra, Mapping) else [])
    )
    return driven and not held


def not_deterministic(
    first: Mapping[str, str], second: Mapping[str, str], first_saves: Saves, second_saves: Saves
) -> str:
    """The line for two uninterrupted runs that ended differently."""
    parts = differing(first, second) or ["the digest"]
    saves = first_differences(first_saves, second_saves)
    where = min(saves.values(), default=None)
    since = f" (from the save of step {where} on)" if where is not None else ""
    return (
        f"the trainer is not deterministic: two uninterrupted runs ended with different "
        f"{', '.join(parts)}{since}, so a rehearsal cannot tell what a resume lost from what "
        "any rerun changes; seed every generator it draws from and call "
        "torch.use_deterministic_algorithms(True)"
    )


def explain(
    reference: Mapping[str, str],
    interrupted: Mapping[str, str],
    reference_saves: Saves,
    interrupted_saves: Saves,
    resumes: list[int],
    *,
    scheduler_unsaved: bool = False,
) -> list[str]:
    """Lines naming each part that differs between a deterministic trainer's uninterrupted
    run and its interrupted one, from which save on, and the likely cause of the first."""
    first = first_differences(reference_saves, interrupted_saves)
    if not first:
        parts = differing(reference, interrupted)
        after = f" after its last resume (step {resumes[-1]})" if resumes else ""
        return [
            f"{', '.join(parts) or 'the state'} differ(s) only at the end: every save both runs "
            f"made matched, but what the trainer did{after} is not what it did uninterrupted"
        ]
    rank = {part: place for place, part in enumerate(ORDER)}
    ordered = sorted(first, key=lambda part: (first[part], rank.get(part, -1), part))
    common = sorted(set(reference_saves) & set(interrupted_saves))
    lines = [
        f"{part} differs from the save of step {first[part]} on "
        f"({_since_resume(first[part], resumes, common)})"
        for part in ordered
    ]
    lines.append(_cause(ordered[0], scheduler_unsaved=scheduler_unsaved))
    return lines


def _since_resume(step: int, resumes: list[int], common: list[int]) -> str:
    before = [r for r in resumes if r < step]
    if not before:
        return "before any resume"
    resumed = before[-1]
    between = [s for s in common if resumed < s < step]
    which = "the first save" if not between else f"save {len(between) + 1}"
    return f"{which} after the resume at step {resumed}"


def _cause(part: str, *, scheduler_unsaved: bool) -> str:
    """What a part that differs first usually means."""
    if part in ("optimizer", "model") and scheduler_unsaved:
        return (
            "the trainer does not hand its scheduler to training(): an LR scheduler drives "
            "the optimizer (its param groups carry initial_lr) and no checkpoint holds the "
            "scheduler's state, so a resumed run starts the schedule over; allowed: "
            "training(model=..., optimizer=..., scheduler=scheduler)"
        )
    if part == "optimizer":
        return (
            "the optimizer's state after a resume is not what was saved: something changes "
            "it outside training()'s checkpoint (a scheduler, code that sets the learning "
            "rate); hand that object to training() by name"
        )
    if part == "model":
        return (
            "the model's weights part ways while the optimizer's state still matched: "
            "something that shapes the updates is not in the checkpoint (a generator of the "
            "trainer's own, a data loader's position); hand it to training() by name"
        )
    if part == "rng":
        return (
            "torch's random state differs: the trainer draws from torch's generator outside "
            "its steps (after training() restored it, before the first step), so a resumed "
            "run draws other numbers"
        )
    return (
        f"{part}'s state_dict() does not hold all of its state, or its load_state_dict() "
        f"does not restore it all: a resumed {part} goes on differently"
    )
