"""Engine counters: what the torch engine computed, moved, and how long it took."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from heddle.workers.engines.torch_engine.kv_manager import KVMoveStats


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Counters since start: what the engine computed, moved and how long it took."""

    num_steps: int = 0
    num_decode_steps: int = 0
    num_decoded_tokens: int = 0
    num_prefilled_tokens: int = 0
    num_recomputed_tokens: int = 0
    num_restored_tokens: int = 0
    num_preemptions: int = 0
    num_evictions: int = 0
    prefill_s: float = 0.0
    recompute_s: float = 0.0
    """The share of ``prefill_s`` spent on recomputed tokens."""
    decode_s: float = 0.0
    restore_s: float = 0.0
    park_s: float = 0.0
    decode_s_by_batch: dict[int, float] = field(default_factory=dict)
    """Decode time split by the batch size of the step (the raw data of F(b))."""
    num_decode_steps_by_batch: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class Counters:
    """The core's running totals (mutable, engine thread only); ``EngineStats`` is the snapshot."""

    num_steps: int = 0
    num_decode_steps: int = 0
    num_decoded_tokens: int = 0
    num_prefilled_tokens: int = 0
    num_recomputed_tokens: int = 0
    num_preemptions: int = 0
    prefill_s: float = 0.0
    recompute_s: float = 0.0
    decode_s: float = 0.0
    decode_s_by_batch: dict[int, float] = field(default_factory=dict)
    num_decode_steps_by_batch: dict[int, int] = field(default_factory=dict)

    def add_decode_step(self, batch_size: int, elapsed_s: float) -> None:
        self.num_decode_steps += 1
        self.num_decoded_tokens += batch_size
        self.decode_s += elapsed_s
        by_batch = self.decode_s_by_batch
        by_batch[batch_size] = by_batch.get(batch_size, 0.0) + elapsed_s
        steps = self.num_decode_steps_by_batch
        steps[batch_size] = steps.get(batch_size, 0) + 1

    def snapshot(self, moves: KVMoveStats, *, num_evictions: int) -> EngineStats:
        """The totals so far, with the KV manager's moves and the prefix store's evictions."""
        return EngineStats(
            num_steps=self.num_steps,
            num_decode_steps=self.num_decode_steps,
            num_decoded_tokens=self.num_decoded_tokens,
            num_prefilled_tokens=self.num_prefilled_tokens,
            num_recomputed_tokens=self.num_recomputed_tokens,
            num_restored_tokens=moves.num_restored_tokens,
            num_preemptions=self.num_preemptions,
            num_evictions=num_evictions,
            prefill_s=self.prefill_s,
            recompute_s=self.recompute_s,
            decode_s=self.decode_s,
            restore_s=moves.restore_s,
            park_s=moves.park_s,
            decode_s_by_batch=dict(self.decode_s_by_batch),
            num_decode_steps_by_batch=dict(self.num_decode_steps_by_batch),
        )
