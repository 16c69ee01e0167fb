"""The reference model's data parallelism across a gang, or none alone: what its training
step does differently on a rank, behind one interface.

A gang's ranks (``training()`` joins them: ``runtime.group``) train data-parallel with the
optimizer state sharded ZeRO-1 style, so every rank's checkpoint is a real shard:

- each rank computes gradients on its slice of the step's batch; they are averaged with
  one all-reduce;
- each parameter belongs to one rank (balanced by size), which alone keeps its AdamW
  moments and updates it, then broadcasts the new value to the others;
- a rank's shard is its own parameters, their optimizer state and its dropout RNG: what it
  hands to ``training()``; a restored gang broadcasts each parameter from its owner, so
  every replica is whole again.

A collective of the model's that fails means a rank is gone: it raises
``runtime.group.PeerLost``, which ``training()`` turns into the gang's way out.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from spotproof.runtime.group import PeerLost


class Alone:
    """One process: the whole model is its own; nothing to share."""

    rank, world_size = 0, 1

    def owned(self, model: torch.nn.Module) -> torch.nn.Module:
        """The part of the model this process updates and checkpoints."""
        return model

    def seed_dropout(self, seed: int) -> None:
        """Each rank draws its own dropout masks; alone, the build's seed goes on."""
        return None

    def rows(self, batch: torch.Tensor) -> torch.Tensor:
        return batch

    def average_gradients(self, model: torch.nn.Module) -> None:
        return None

    def share_parameters(self, model: torch.nn.Module) -> None:
        return None


class DataParallel(Alone):
    """Rank ``rank`` of ``world_size``, over the default process group."""

    _owners: list[int]
    """Each parameter's owning rank, set by :meth:`owned`."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size

    def _assign_owners(self, model: torch.nn.Module) -> list[int]:
        """The rank that owns each parameter: largest first, each to the rank holding the
        fewest elements so far, so shards come out about the same size."""
        parameters = list(model.parameters())
        owners, load = [0] * len(parameters), [0] * self.world_size
        for index in sorted(range(len(parameters)), key=lambda i: -parameters[i].numel()):
            rank = load.index(min(load))
            owners[index] = rank
            load[rank] += parameters[index].numel()
        return owners

    def owned(self, model: torch.nn.Module) -> torch.nn.Module:
        """This rank's parameters, the same objects as the model's (not copies). Decides
        who owns what once, for :meth:`share_parameters` to use every step."""
        self._owners = self._assign_owners(model)
        pairs = zip(model.parameters(), self._owners, strict=True)
        return torch.nn.ParameterList([p for p, rank in pairs if rank == self.rank])

    def seed_dropout(self, seed: int) -> None:
        torch.manual_seed(seed * 1_009 + self.rank + 1)

    def rows(self, batch: torch.Tensor) -> torch.Tensor:
        return batch[self.rank :: self.world_size]

    def average_gradients(self, model: torch.nn.Module) -> None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self._collective(dist.all_reduce, flat, op=dist.ReduceOp.SUM)
        flat /= self.world_size
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()

    def share_parameters(self, model: torch.nn.Module) -> None:
        with torch.no_grad():
            for parameter, owner in zip(model.parameters(), self._owners, strict=True):
                self._collective(dist.broadcast, parameter.data, src=owner)

    def _collective(self, operation: Any, *args: Any, **kwargs: Any) -> None:
        try:
            operation(*args, **kwargs)
        except RuntimeError as error:  # gloo's errors, DistBackendError included
            raise PeerLost(f"rank {self.rank}: a collective failed: {error}") from None
