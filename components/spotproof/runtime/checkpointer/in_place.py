"""Restoring a checkpoint straight into the model's tensors and the optimizer's state.

``torch_state.restore`` takes blobs the loader has read into buffers of its own, then
``load_state_dict`` copies them into the model: the state's size in fresh memory to fault
in, and a second pass over every byte. Here, as ``torch.distributed.checkpoint``'s
``load`` does for its own format, the bytes go where they will stay:

1. the small ``skeleton`` blob is read (and verified) first and decoded: the structure of
   the state and where each tensor lies in the ``tensors`` blob;
2. each tensor is matched to its destination: the model's own parameter or buffer
   (``model.state_dict()`` shares their memory), the optimizer's own state tensor, or, for
   anything else (a fresh replacement's optimizer has no state yet, the RNG states, a
   tensor on a GPU, of another dtype, or not contiguous), a tensor allocated once for it.
   A model or optimizer the state cannot fit (other keys, shapes, parameter groups) is a
   :class:`RestoreError` here, before anything is written;
3. every byte range of the ``tensors`` blob is read into its destination
   (``reading.StoredBlobs.read_into``; a part may fill several tensors and a tensor span
   several parts), each part verified by its CRC32C over the memory it landed in;
4. ``load_state_dict`` then runs as usual, on the destinations themselves: for a tensor
   that already is the model's (or the optimizer's) own it copies nothing (``copy_`` of a
   tensor onto its own memory returns at once; the optimizer keeps a tensor of its
   parameter's dtype and device as it is), and it copies the rest, to the GPU where the
   model lives there.

How a failure half-way is undone
--------------------------------
A part that fails verification (or vanishes) after others have landed leaves the model
partly written: that cannot be avoided without reading into a second copy, the very cost
this module removes. It is undone by what follows, never by hoping:

- ``CheckpointStore.load_latest`` skips the step (a ``ValueError``, as for any part that
  fails) and restores the next older one, and a restore that succeeds writes the *whole*
  state: every key of ``model.state_dict()`` (the keys must be the same, checked in 2),
  the optimizer's state replaced as a whole by ``load_state_dict``, every RNG. Nothing of
  the failed step survives it. A gang's ranks fall back to the step they agree on the
  same way, each over its own shard.
- When no older step restores, the state is the failed one's, partly: the caller must
  build its objects again or not train from them (``runtime.loop`` exits 2, as it does
  when a restore that loaded part of its state was refused: it cannot build the objects it
  was given). :attr:`InPlaceLoad.touched` says whether a restore began writing.
"""

from __future__ import annotations

from typing import Any

import torch

from spotproof.runtime.checkpointer import torch_state
from spotproof.runtime.checkpointer.checkpoint import Checkpoint, ReadsInPlace, RestoreError
from spotproof.runtime.checkpointer.torch_state import TENSOR_KEY, Entry, byte_view

FITS = "the state does not fit this model"


class InPlaceLoad:
    """One checkpoint matched to a model's and optimizer's tensors, nothing written yet.

    Constructing it reads the skeleton and raises :class:`RestoreError` for a state that
    does not fit; :meth:`load` then reads the tensors in and applies the state."""

    def __init__(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, checkpoint: Checkpoint
    ) -> None:
        stored = checkpoint.stored
        if stored is None:
            raise ValueError("an in-place load needs a checkpoint opened by a ReadsInPlace")
        for name in ("skeleton", "tensors"):
            if name not in stored.sizes:
                raise RestoreError(f"no {name!r} blob: not state saved by StateBuffer.capture")
        self.model, self.optimizer, self.stored = model, optimizer, stored
        skeleton, self.entries = torch_state.read_header(
            stored.read("skeleton"), stored.sizes["tensors"]
        )
        torch_state.fill(skeleton, [torch.empty(0)] * len(self.entries))  # its shape, checked
        self.destinations = _destinations(model, optimizer, skeleton, self.entries)
        self.state = torch_state.fill(skeleton, self.destinations)
        self.touched = False
        """Whether :meth:`load` began writing into the model or the optimizer."""

    @property
    def extra(self) -> dict[str, Any]:
        """The ``extra`` state saved beside the model and optimizer; its tensors hold
        their values once :meth:`load` has returned."""
        extra = self.state.get("extra")
        return extra if isinstance(extra, dict) else {}

    def load(self) -> dict[str, Any]:
        """Read every tensor into its destination and load the state; returns it (``step``,
        ``extra``). Raises ``ValueError`` for a part that fails verification and
        :class:`RestoreError` for state that does not load: see the module's docstring
        for what the state is then."""
        targets = sorted(
            (entry.offset, byte_view(tensor))
            for entry, tensor in zip(self.entries, self.destinations, strict=True)
            if entry.size
        )
        self.touched = True
        self.stored.read_into("tensors", targets)
        torch_state.apply(self.model, self.optimizer, self.state)
        return self.state


def restore(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, checkpoint: Checkpoint
) -> dict[str, Any]:
    """Load ``checkpoint`` into ``model`` and ``optimizer`` in place; one read by the loader
    (blobs already in memory) is loaded by ``torch_state.restore`` instead."""
    if checkpoint.stored is None:
        return torch_state.restore(model, optimizer, checkpoint.blobs)
    return InPlaceLoad(model, optimizer, checkpoint).load()


def into(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> ReadsInPlace:
    """The ``restore`` for ``load_latest`` that loads each checkpoint into ``model`` and
    ``optimizer`` in place."""

    def load(checkpoint: Checkpoint) -> None:
        restore(model, optimizer, checkpoint)

    return ReadsInPlace(load)


def _destinations(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, skeleton: Any, entries: list[Entry]
) -> list[torch.Tensor]:
    """Where each layout entry's bytes go: the model's or optimizer's own tensor where one
    takes them as they are, else a tensor allocated for them."""
    live: list[torch.Tensor | None] = [None] * len(entries)
    for index, tensor in _model_tensors(model, skeleton["model"], entries):
        live[index] = tensor
    for index, tensor in _optimizer_tensors(optimizer, skeleton["optimizer"], entries):
        live[index] = tensor
    direct = sorted(
        (tensor.data_ptr(), index)
        for index, tensor in enumerate(live)
        if tensor is not None and _takes_as_is(tensor, entries[index])
    )
    own: dict[int, torch.Tensor] = {}
    end = -1  # two entries must not land in one tensor's memory (tied weights)
    for address, index in direct:
        if address >= end:
            own[index] = live[index]  # type: ignore[assignment]
            end = address + entries[index].size
    return [own[i] if i in own else _allocated(entry, live[i]) for i, entry in enumerate(entries)]


def _takes_as_is(tensor: torch.Tensor, entry: Entry) -> bool:
    return (
        tensor.device.type == "cpu"
        and tensor.is_contiguous()
        and tensor.dtype == entry.dtype
        and tuple(tensor.shape) == entry.shape
    )


def _allocated(entry: Entry, live: torch.Tensor | None) -> torch.Tensor:
    """A CPU tensor for ``entry``; pinned when it is bound for a GPU, so the copy there
    is a DMA."""
    pin = live is not None and live.device.type == "cuda" and torch.cuda.is_available()
    return torch.empty(entry.shape, dtype=entry.dtype, pin_memory=pin)


def _index(value: Any) -> int | None:
    if isinstance(value, dict) and set(value) == {TENSOR_KEY}:
        return value[TENSOR_KEY]
    return None


def _model_tensors(
    model: torch.nn.Module, saved: Any, entries: list[Entry]
) -> list[tuple[int, torch.Tensor]]:
    """The model's own tensor for each saved one; :class:`RestoreError` when the keys or
    a shape differ (what ``load_state_dict`` refuses, found before anything is written)."""
    own = model.state_dict()
    if not isinstance(saved, dict):
        raise RestoreError(f"{FITS}: the checkpoint holds no model state")
    missing, unexpected = sorted(set(own) - set(saved)), sorted(set(saved) - set(own))
    if missing or unexpected:
        raise RestoreError(f"{FITS}: missing keys {missing[:3]}, unexpected {unexpected[:3]}")
    found = []
    for key, value in saved.items():
        index, tensor = _index(value), own[key]
        if index is None or not isinstance(tensor, torch.Tensor):
            continue
        if tuple(tensor.shape) != entries[index].shape:
            raise RestoreError(
                f"{FITS}: {key} has shape {list(entries[index].shape)} in the checkpoint, "
                f"{list(tensor.shape)} in the model"
            )
        found.append((index, tensor))
    return found


def _optimizer_tensors(
    optimizer: torch.optim.Optimizer, saved: Any, entries: list[Entry]
) -> list[tuple[int, torch.Tensor]]:
    """The optimizer's own state tensor for each saved one, where it has state already;
    :class:`RestoreError` when the parameter groups differ or element-wise state does not
    have its parameter's shape."""
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    ours = optimizer.param_groups
    if not isinstance(groups, list) or not isinstance(saved.get("state"), dict):
        raise RestoreError(f"{FITS}: the checkpoint holds no optimizer state")
    if [len(g.get("params", ())) for g in groups] != [len(g["params"]) for g in ours]:
        raise RestoreError(f"{FITS}: the optimizer's parameter groups differ")
    saved_ids = [param_id for group in groups for param_id in group["params"]]
    position = {param_id: index for index, param_id in enumerate(saved_ids)}
    parameters = [parameter for group in ours for parameter in group["params"]]
    state = optimizer.state_dict()["state"]
    found = []
    for param_id, slots in saved["state"].items():
        if param_id not in position or not isinstance(slots, dict):
            continue  # load_state_dict keeps it as it is; nothing of ours to write
        parameter = parameters[position[param_id]]
        current = state.get(position[param_id], {})
        for slot, value in slots.items():
            index = _index(value)
            if index is None:
                continue
            if slot in torch_state.ELEMENTWISE_STATE and entries[index].shape != tuple(
                parameter.shape
            ):
                raise RestoreError(
                    f"{FITS}: optimizer state {slot!r} has shape {list(entries[index].shape)}, "
                    f"its parameter {list(parameter.shape)}"
                )
            tensor = current.get(slot)
            if isinstance(tensor, torch.Tensor):
                found.append((index, tensor))
    return found
