"""Owner of every KV tensor of the engine: running slots, parked blocks and cached prefixes.

A sequence's KV is in exactly one place: its slot while running, ``parked[request_id]`` while it
waits holding KV (preempted, or given its trajectory's cached prefix), or nowhere. A trajectory's
KV between requests is an entry of the ``PrefixStore``. The scheduler decides; this class moves
the tensors and keeps each ``Sequence.num_kv_tokens`` equal to what is stored for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from heddle.workers.engines.torch_engine.kv import KVBlock, SlotPool
from heddle.workers.engines.torch_engine.prefix_store import (
    CacheEntry,
    PrefixStore,
    common_prefix_len,
)
from heddle.workers.engines.torch_engine.sequence import Sequence


@dataclass(slots=True)
class KVMoveStats:
    num_restored_tokens: int = 0
    """Tokens copied from parked blocks back into slots (resumes without recompute)."""
    restore_s: float = 0.0
    num_parked_tokens: int = 0
    park_s: float = 0.0


class KVCacheManager:
    def __init__(self, pool: SlotPool, store: PrefixStore[KVBlock], park_device: torch.device):
        self.pool = pool
        self.store = store
        self.park_device = park_device
        self.parked: dict[str, KVBlock] = {}
        self.stats = KVMoveStats()

    def claim_prefix(self, seq: Sequence) -> None:
        """Give a new sequence its trajectory's cached prefix (the part its prompt shares).

        At least the last prompt token is left to prefill: its logits give the first output.
        """
        prompt = seq.request.input_token_ids
        entry = self.store.take(seq.trajectory_id)
        seq.num_known_tokens = self.store.num_lost_tokens(seq.trajectory_id, prompt)
        if entry is None:
            return
        num_reused = min(common_prefix_len(entry.token_ids, prompt), len(prompt) - 1)
        seq.num_known_tokens = max(seq.num_known_tokens, num_reused)
        if num_reused > 0:
            self.parked[seq.request_id] = entry.payload.truncated(num_reused)
            seq.num_kv_tokens = num_reused

    def restore(self, seq: Sequence) -> int:
        """Give ``seq`` a slot holding its parked KV (if any); returns the slot."""
        slot = self.pool.acquire(seq)
        block = self.parked.pop(seq.request_id, None)
        if block is not None:
            started = time.perf_counter()
            self.pool.write(slot, block)
            self.stats.num_restored_tokens += block.num_tokens
            self.stats.restore_s += time.perf_counter() - started
        return slot

    def park(self, seq: Sequence) -> None:
        """Move a running sequence's KV out of its slot (kept for its resume), freeing the slot."""
        if seq.num_kv_tokens > 0:
            started = time.perf_counter()
            self.parked[seq.request_id] = self._read_slot(seq)
            self.stats.num_parked_tokens += seq.num_kv_tokens
            self.stats.park_s += time.perf_counter() - started
        self.pool.release(seq)

    def drop_parked(self, seq: Sequence) -> None:
        self.parked.pop(seq.request_id, None)

    def clear_active(self) -> None:
        """Forget every slot and parked block (after a failed step); cached prefixes stay."""
        self.pool.owners.clear()
        self.parked.clear()

    def cache_prefix(self, seq: Sequence) -> None:
        """Keep an ending sequence's KV as its trajectory's cached prefix; frees its slot."""
        block = self.block_of(seq)
        if seq in self.pool.owners:
            self.pool.release(seq)
        self.parked.pop(seq.request_id, None)
        if block is not None and block.num_tokens > 0:
            self.store.put(seq.trajectory_id, CacheEntry(block.token_ids, block))

    def block_of(self, seq: Sequence) -> KVBlock | None:
        """The sequence's KV wherever it is (a copy when in a slot), or None."""
        if seq in self.pool.owners:
            return self._read_slot(seq) if seq.num_kv_tokens > 0 else None
        return self.parked.get(seq.request_id)

    def _read_slot(self, seq: Sequence) -> KVBlock:
        tokens = tuple(seq.context[: seq.num_kv_tokens])
        block = self.pool.read(self.pool.slot_of(seq), tokens)
        return block.to(self.park_device) if block.data.device != self.park_device else block
