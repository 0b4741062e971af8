"""KV storage: the slot pool of the running batch and blocks of KV outside it.

Layout. The running batch lives in one tensor per engine,
``[layers, 2 (K, V), slots, kv_heads, capacity, head_dim]``. Running sequence i owns slot i and
the owners are kept dense (slots ``0..n-1``): freeing a slot moves the last owner into it. A decode
step therefore attends over views of the first n rows of each layer, with no per-step gather (the
per-request caches are stacked once, when a request joins). Rows are as long as the longest
running sequence needs (``capacity`` grows by doubling); the engine's token budget, not this
tensor's size, bounds how much KV it holds. Every method that allocates or writes the tensor runs
in ``torch.inference_mode`` (as the forwards do), so the tensor is always an inference tensor.

A ``KVBlock`` is the KV of a token prefix outside the pool, ``[layers, 2, kv_heads, n, head_dim]``:
a preempted request's parked cache, a trajectory's cached prefix between turns, or an export.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from heddle.workers.engines.torch_engine.loading import KVLayout


@dataclass(frozen=True, slots=True)
class KVBlock:
    token_ids: tuple[int, ...]
    """The tokens whose KV this is, from position 0."""
    data: torch.Tensor
    """``[layers, 2, kv_heads, len(token_ids), head_dim]``."""

    def __post_init__(self) -> None:
        if self.data.ndim != 5 or self.data.shape[3] != len(self.token_ids):
            raise ValueError(
                f"KV block of {len(self.token_ids)} tokens has data of shape "
                f"{tuple(self.data.shape)}"
            )

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_bytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def truncated(self, num_tokens: int) -> KVBlock:
        """The first ``num_tokens`` tokens (a view, no copy)."""
        return KVBlock(self.token_ids[:num_tokens], self.data[:, :, :, :num_tokens])

    def to(self, device: torch.device | str) -> KVBlock:
        return KVBlock(self.token_ids, self.data.to(device))


class HoldsKV(Protocol):
    """A slot owner: the pool moves ``num_kv_tokens`` of its KV when compacting."""

    @property
    def num_kv_tokens(self) -> int: ...


class SlotPool:
    """Device KV of the running batch; see the module docstring for the layout."""

    def __init__(
        self, layout: KVLayout, *, num_slots: int, device: torch.device, capacity_tokens: int
    ) -> None:
        self.layout = layout
        self.num_slots = num_slots
        self.device = device
        self.owners: list[HoldsKV] = []
        """Slot i belongs to ``owners[i]``; the decode batch is this list, in order."""
        self._data = self._allocate(capacity_tokens)

    @property
    def capacity_tokens(self) -> int:
        return int(self._data.shape[4])

    @property
    def num_used(self) -> int:
        return len(self.owners)

    def keys(self, layer: int) -> torch.Tensor:
        """``[slots, kv_heads, capacity, head_dim]`` view of one layer's keys."""
        return self._data[layer, 0]

    def values(self, layer: int) -> torch.Tensor:
        return self._data[layer, 1]

    def slot_of(self, owner: HoldsKV) -> int:
        return next(slot for slot, held in enumerate(self.owners) if held is owner)

    def can_acquire(self) -> bool:
        return len(self.owners) < self.num_slots

    def acquire(self, owner: HoldsKV) -> int:
        if not self.can_acquire():
            raise RuntimeError(f"all {self.num_slots} KV slots are in use")
        self.owners.append(owner)
        return len(self.owners) - 1

    @torch.inference_mode()
    def release(self, owner: HoldsKV) -> None:
        """Free ``owner``'s slot, moving the last owner's KV into it to keep slots dense."""
        slot = self.slot_of(owner)
        last = self.owners.pop()
        if last is not owner:
            num_tokens = last.num_kv_tokens
            source = self._data[:, :, len(self.owners), :, :num_tokens]
            self._data[:, :, slot, :, :num_tokens].copy_(source)
            self.owners[slot] = last

    @torch.inference_mode()
    def ensure_capacity(self, num_tokens: int) -> None:
        """Make every slot able to hold ``num_tokens`` tokens (doubling, keeping contents)."""
        if num_tokens <= self.capacity_tokens:
            return
        grown = self._allocate(max(num_tokens, 2 * self.capacity_tokens))
        grown[:, :, :, :, : self.capacity_tokens].copy_(self._data)
        self._data = grown

    @torch.inference_mode()
    def write(self, slot: int, block: KVBlock) -> None:
        """Put ``block`` at positions ``0..block.num_tokens`` of ``slot``."""
        self.ensure_capacity(block.num_tokens)
        target = self._data[:, :, slot, :, : block.num_tokens]
        target.copy_(block.data.to(self.device, non_blocking=True))

    @torch.inference_mode()
    def read(self, slot: int, token_ids: tuple[int, ...]) -> KVBlock:
        """A copy of the KV of ``slot``'s first ``len(token_ids)`` positions."""
        data = self._data[:, :, slot, :, : len(token_ids)].clone()
        return KVBlock(token_ids, data)

    @torch.inference_mode()
    def _allocate(self, capacity_tokens: int) -> torch.Tensor:
        layout = self.layout
        shape = (
            layout.num_layers,
            2,
            self.num_slots,
            layout.num_kv_heads,
            capacity_tokens,
            layout.head_dim,
        )
        return torch.zeros(shape, dtype=layout.dtype, device=self.device)
