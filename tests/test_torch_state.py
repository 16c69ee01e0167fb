"""Training state as checkpoint blobs: one flat buffer, restored bit for bit, and byte views
that need no NumPy."""

from __future__ import annotations

import ctypes
import gc
import io
import struct
from pathlib import Path

import pytest
import torch

from spotproof.runtime.checkpointer.checkpoint import CheckpointStore, RestoreError
from spotproof.runtime.checkpointer.torch_state import StateBuffer, byte_view, restore


def _trained(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(5, 8)).sum().backward()
        optimizer.step()
    return model, optimizer


def test_byte_view_is_the_tensors_memory_in_order() -> None:
    tensor = torch.tensor([1.5, -2.0], dtype=torch.float32)
    assert bytes(byte_view(tensor)) == struct.pack("<2f", 1.5, -2.0)


def test_byte_view_keeps_its_tensor_alive() -> None:
    view = byte_view(torch.full((1 << 16,), 7, dtype=torch.uint8))
    gc.collect()
    torch.zeros(1 << 16, dtype=torch.uint8)  # would reuse freed memory
    assert set(bytes(view)) == {7}


def test_byte_view_refuses_a_strided_tensor() -> None:
    with pytest.raises(ValueError, match="contiguous CPU tensor"):
        byte_view(torch.zeros(4, 4).t())


def test_capture_and_restore_reproduce_model_and_optimizer_exactly() -> None:
    model, optimizer = _trained(seed=1)
    captured = StateBuffer().capture(model, optimizer, 3)
    blobs = {name: bytearray(blob) for name, blob in captured.items()}  # as a load returns them
    fresh, fresh_optimizer = _trained(seed=2)
    state = restore(fresh, fresh_optimizer, blobs)
    assert state["step"] == 3
    for name, tensor in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], tensor), name
    restored = fresh_optimizer.state_dict()["state"]
    for index, slots in optimizer.state_dict()["state"].items():
        for slot, value in slots.items():
            assert torch.equal(restored[index][slot], value), (index, slot)


def test_prepare_allocates_the_buffer_the_first_capture_fills() -> None:
    model, optimizer = _trained(seed=1)
    buffer = StateBuffer()
    size = buffer.prepare(model, optimizer)
    prepared = buffer._buffer.data_ptr()  # type: ignore[union-attr]
    captured = buffer.capture(model, optimizer, 3)
    assert len(captured["tensors"]) == size
    assert ctypes.addressof(captured["tensors"].obj) == prepared  # filled in place


# --- state that verifies but does not fit ----------------------------------------------


def _captured() -> dict[str, bytearray]:
    model, optimizer = _trained(seed=1)
    captured = StateBuffer().capture(model, optimizer, 3)
    return {name: bytearray(blob) for name, blob in captured.items()}


def _header_with(**changes: object) -> bytes:
    header = torch.load(io.BytesIO(bytes(_captured()["skeleton"])), weights_only=True)
    header.update(changes)
    buffer = io.BytesIO()
    torch.save(header, buffer)
    return buffer.getvalue()


class Planted:
    """Not data: a class that weights_only loading must refuse to build."""


def _refused_pickle() -> bytes:
    buffer = io.BytesIO()
    torch.save({"skeleton": Planted(), "layout": []}, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda blobs: blobs.pop("tensors"), "no 'tensors' blob"),
        (lambda blobs: blobs.update(skeleton=b"garbage"), "the skeleton is unreadable"),
        (lambda blobs: blobs.update(skeleton=_refused_pickle()), "the skeleton is unreadable"),
        (lambda blobs: blobs.update(tensors=blobs["tensors"][:-4]), "layout entry"),
        (
            lambda blobs: blobs.update(skeleton=_header_with(layout=[[0, 3, "float32", [2]]])),
            "layout entry",
        ),
        (
            lambda blobs: blobs.update(skeleton=_header_with(skeleton={"step": 1})),
            "not a training state",
        ),
    ],
    ids=[
        "dropped blob",
        "garbage skeleton",
        "refused pickle",
        "short tensors",
        "wrong size",
        "no model",
    ],
)
def test_state_that_is_not_a_capture_is_a_restore_error(change: object, says: str) -> None:
    blobs = _captured()
    change(blobs)  # type: ignore[operator]
    model, optimizer = _trained(seed=2)
    with pytest.raises(RestoreError, match=says):
        restore(model, optimizer, blobs)


def test_state_of_another_model_shape_is_a_restore_error() -> None:
    blobs = _captured()
    torch.manual_seed(0)
    wider = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with pytest.raises(RestoreError, match="does not fit this model: RuntimeError"):
        restore(wider, torch.optim.Adam(wider.parameters()), blobs)


def test_a_restore_error_in_load_latest_falls_back_to_the_older_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(f"file://{tmp_path}")
    store.save(1, _captured())
    store.save(2, {"skeleton": b"garbage", "tensors": b""})
    model, optimizer = _trained(seed=2)
    skipped: list[tuple[int, str]] = []

    loaded = store.load_latest(
        on_skip=lambda step, why: skipped.append((step, why)),
        restore=lambda checkpoint: restore(model, optimizer, checkpoint.blobs),
    )

    assert loaded is not None and loaded.step == 1
    assert skipped[0][0] == 2 and "the skeleton is unreadable" in skipped[0][1]
    reference, _ = _trained(seed=1)
    for name, tensor in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
