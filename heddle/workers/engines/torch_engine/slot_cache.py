"""Adapter that lets a transformers model read and write the slot pool as its KV cache.

transformers attention layers call ``cache.update(new_keys, new_values, layer_idx)`` and attend
over what it returns. Before each forward the runner ``plan``s which contiguous slots form the
batch and where each row's new tokens go; ``update`` then writes the new K/V in place and returns
views of those rows up to ``kv_len`` (no copy). The runner's 4-D attention mask hides each row's
positions past its own length, so rows of different lengths share one forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import Cache

from heddle.workers.engines.torch_engine.kv import SlotPool


@dataclass(frozen=True, slots=True)
class ForwardPlan:
    first_slot: int
    num_rows: int
    write_positions: torch.Tensor
    """``[num_rows]`` (long, on the pool's device): where each row's first new token goes."""
    first_position: int
    """``write_positions[0]`` as an int (a single-row prefill slices with it, without a sync)."""
    kv_len: int
    """Keys visible to this forward: the longest row's length after the write."""


class SlotCache(Cache):
    """A ``transformers.Cache`` over a ``SlotPool``; valid for the forward it was planned for."""

    def __init__(self, pool: SlotPool) -> None:
        super().__init__(layers=[])
        self.pool = pool
        self._plan: ForwardPlan | None = None

    def plan(self, plan: ForwardPlan) -> None:
        self._plan = plan

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *_: Any,
        **__: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        plan = self._require_plan()
        rows = slice(plan.first_slot, plan.first_slot + plan.num_rows)
        keys = self.pool.keys(layer_idx)[rows]
        values = self.pool.values(layer_idx)[rows]
        _write(keys, key_states, plan)
        _write(values, value_states, plan)
        return keys[:, :, : plan.kv_len], values[:, :, : plan.kv_len]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens seen before this forward (only transformers' own helpers ask)."""
        return 0 if self._plan is None else self._plan.kv_len

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return self.pool.capacity_tokens

    def _require_plan(self) -> ForwardPlan:
        if self._plan is None:
            raise RuntimeError("SlotCache.update called outside a planned forward")
        return self._plan


def _write(rows: torch.Tensor, new: torch.Tensor, plan: ForwardPlan) -> None:
    """Write ``new`` ``[rows, heads, T, dim]`` into ``rows`` at ``write_positions[r] .. + T``."""
    num_rows, _, num_new, _ = new.shape
    if num_rows == 1:
        start = plan.first_position
        rows[0, :, start : start + num_new] = new[0]
    elif num_new == 1:
        # Decode: one token per row, each at its own position (an indexed scatter).
        row_index = torch.arange(num_rows, device=rows.device)
        rows[row_index, :, plan.write_positions] = new[:, :, 0]
    else:
        raise ValueError("a forward writes one token per row or several tokens of one row")
