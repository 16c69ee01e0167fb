"""Training state as checkpoint blobs: one flat buffer, restored bit for bit, and byte views
that need no NumPy."""

from __future__ import annotations

import ctypes
import gc
import struct

import pytest
import torch

from spotproof.runtime.torch_state import StateBuffer, byte_view, restore


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
