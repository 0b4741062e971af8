"""Forward passes over the slot pool: chunked prefill of one slot, one batched decode of many.

A decode step is ONE forward over every running row ``[B, 1]``: each row has its own position
id and its own KV length, and a ``[B, 1, 1, kv_len]`` mask hides keys past each row's end. Rows
shorter than the longest pay for the padded keys, which is the interference that makes per-token
time grow with batch size (what ``heddle bench engine`` measures as F(b)).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from heddle.workers.engines.torch_engine.kv import SlotPool
from heddle.workers.engines.torch_engine.loading import LoadedModel
from heddle.workers.engines.torch_engine.slot_cache import ForwardPlan, SlotCache


class ModelRunner:
    def __init__(self, model: LoadedModel, pool: SlotPool, *, max_chunk_tokens: int) -> None:
        self.model = model
        self.pool = pool
        self.max_chunk_tokens = max_chunk_tokens
        self._cache = SlotCache(pool)

    @torch.inference_mode()
    def prefill(self, slot: int, token_ids: Sequence[int], start_position: int) -> torch.Tensor:
        """Compute KV for ``token_ids`` at ``start_position..`` of ``slot``.

        Returns the float32 logits ``[vocab]`` after the last token. The slot must already hold
        the KV of positions ``0..start_position``.
        """
        if not token_ids:
            raise ValueError("prefill needs at least one token")
        self.pool.ensure_capacity(start_position + len(token_ids))
        logits = torch.empty(0)
        for offset in range(0, len(token_ids), self.max_chunk_tokens):
            chunk = token_ids[offset : offset + self.max_chunk_tokens]
            logits = self._prefill_chunk(slot, chunk, start_position + offset)
        return logits[0]

    @torch.inference_mode()
    def decode(self, token_ids: Sequence[int], positions: Sequence[int]) -> torch.Tensor:
        """One token for each of slots ``0..B-1`` at its position: float32 logits ``[B, vocab]``."""
        num_rows = len(token_ids)
        if num_rows != len(positions) or num_rows > self.pool.num_used:
            raise ValueError(f"decode of {num_rows} rows with {len(positions)} positions")
        kv_len = max(positions) + 1
        self.pool.ensure_capacity(kv_len)
        device = self.model.device
        position_ids = torch.tensor(positions, dtype=torch.long, device=device)
        visible = torch.arange(kv_len, device=device)[None, :] <= position_ids[:, None]
        plan = ForwardPlan(
            first_slot=0,
            num_rows=num_rows,
            write_positions=position_ids,
            first_position=positions[0],
            kv_len=kv_len,
        )
        input_ids = torch.tensor(token_ids, dtype=torch.long, device=device)[:, None]
        return self._forward(input_ids, position_ids[:, None], visible[:, None, None, :], plan)

    def _prefill_chunk(self, slot: int, token_ids: Sequence[int], start: int) -> torch.Tensor:
        device = self.model.device
        num_new = len(token_ids)
        kv_len = start + num_new
        query_positions = torch.arange(start, kv_len, device=device)
        visible = torch.arange(kv_len, device=device)[None, :] <= query_positions[:, None]
        plan = ForwardPlan(
            first_slot=slot,
            num_rows=1,
            write_positions=query_positions[:1],
            first_position=start,
            kv_len=kv_len,
        )
        input_ids = torch.tensor([list(token_ids)], dtype=torch.long, device=device)
        return self._forward(input_ids, query_positions[None, :], visible[None, None], plan)

    def _forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        visible: torch.Tensor,
        plan: ForwardPlan,
    ) -> torch.Tensor:
        self._cache.plan(plan)
        output = self.model.module(
            input_ids=input_ids,
            position_ids=position_ids,
            attention_mask=self._mask(visible),
            use_cache=True,
            logits_to_keep=1,
            **{self.model.cache_kwarg: self._cache},
        )
        return output.logits[:, -1, :].float()

    def _mask(self, visible: torch.Tensor) -> torch.Tensor:
        if self.model.mask_kind == "bool":
            return visible
        dtype = self.model.layout.dtype
        blocked = torch.full(
            visible.shape, torch.finfo(dtype).min, dtype=dtype, device=visible.device
        )
        return blocked.masked_fill(visible, 0.0)
