"""The engine core: synchronous, single-threaded continuous batching (``TorchEngine`` hosts it).

One ``step()``: the scheduler picks what runs; the KV manager carries out its preemptions and
drops; each admitted sequence gets a slot, its parked KV back and a prefill of what it lacks
(sampling its first token); then ONE batched decode forward gives every running sequence its
next token. Requests join and leave between steps. Finished sequences leave their KV behind as
their trajectory's cached prefix, which the trajectory's next request re-uses.
"""

from __future__ import annotations

import dataclasses
import itertools
import time

import torch

from heddle.workers.engines.base import EngineLoad, GenerationRequest, GenerationResult
from heddle.workers.engines.torch_engine.forward import ModelRunner
from heddle.workers.engines.torch_engine.kv import KVBlock, SlotPool
from heddle.workers.engines.torch_engine.kv_manager import KVCacheManager
from heddle.workers.engines.torch_engine.loading import LoadedModel, model_fingerprint
from heddle.workers.engines.torch_engine.options import TorchEngineOptions
from heddle.workers.engines.torch_engine.prefix_store import CacheEntry, PrefixStore
from heddle.workers.engines.torch_engine.sampler import RowSampling, request_seed, sample
from heddle.workers.engines.torch_engine.scheduler import (
    Scheduler,
    SchedulerConfig,
    SchedulerOutput,
)
from heddle.workers.engines.torch_engine.sequence import SeqStatus, Sequence
from heddle.workers.engines.torch_engine.stats import Counters, EngineStats
from heddle.workers.engines.torch_engine.validation import check_request
from heddle.workers.engines.torch_engine.weights import copy_state_dict


class EngineCore:
    def __init__(self, model: LoadedModel, options: TorchEngineOptions) -> None:
        self.model = model
        self.options = options
        self.pool = SlotPool(
            model.layout,
            num_slots=options.max_running,
            device=model.device,
            capacity_tokens=options.initial_kv_capacity_tokens,
        )
        park_device = model.device if options.park_on == "device" else torch.device("cpu")
        self.kv = KVCacheManager(self.pool, PrefixStore[KVBlock](), park_device)
        config = SchedulerConfig(
            max_running=options.max_running,
            max_kv_tokens=options.max_kv_tokens,
            preemption=options.preemption,
            keep_kv_on_preemption=options.preemption_mode == "keep",
        )
        self.scheduler = Scheduler(config, self.kv.store)
        self.runner = ModelRunner(
            model, self.pool, max_chunk_tokens=options.max_prefill_chunk_tokens
        )
        self.seqs: dict[str, Sequence] = {}
        self._by_trajectory: dict[str, Sequence] = {}
        self._arrivals = itertools.count()
        self._counters = Counters()

    # Requests -------------------------------------------------------------------------------

    def validate(self, request: GenerationRequest) -> None:
        """Raise ``ValueError`` naming what is wrong with ``request`` for this engine."""
        check_request(
            request,
            vocab_size=self.model.vocab_size,
            max_tokens=min(self.options.max_kv_tokens, self.model.max_positions),
        )

    def submit(self, request: GenerationRequest) -> None:
        self.validate(request)
        if request.request_id in self.seqs:
            raise ValueError(f"request id {request.request_id!r} is already in flight")
        if request.trajectory_id in self._by_trajectory:
            raise ValueError(
                f"trajectory {request.trajectory_id!r} already has a request in flight"
            )
        seq = Sequence(
            request=request,
            arrival=next(self._arrivals),
            seed=request_seed(
                request.sampling.seed,
                self.options.seed,
                request.trajectory_id,
                len(request.input_token_ids),
            ),
            priority=request.priority,
            submitted_at_s=time.perf_counter(),
        )
        self.kv.claim_prefix(seq)
        self.seqs[request.request_id] = seq
        self._by_trajectory[request.trajectory_id] = seq
        self.scheduler.add(seq)

    def abort(self, request_id: str) -> GenerationResult | None:
        """Finish the request with ``abort`` and its partial output (None if not in flight)."""
        seq = self.seqs.get(request_id)
        if seq is None:
            return None
        self.scheduler.remove(seq)
        seq.finish_reason = "abort"
        return self._finish(seq)

    def set_priority(self, request_id: str, priority: float) -> None:
        seq = self.seqs.get(request_id)
        if seq is not None:
            seq.priority = priority

    def preempt(self, request_id: str) -> None:
        """Move a running request back to waiting (keeping its KV in ``keep`` mode)."""
        seq = self.seqs.get(request_id)
        if seq is None or seq.status is not SeqStatus.RUNNING:
            return
        self.scheduler.preempt(seq, keep_kv=self.scheduler.config.keep_kv_on_preemption)
        self.kv.park(seq)
        self._counters.num_preemptions += 1

    # Trajectory caches ------------------------------------------------------------------------

    def release(self, trajectory_id: str) -> None:
        """Drop the trajectory's cached prefix (a request in flight keeps its own KV)."""
        self.kv.store.drop(trajectory_id)

    def swap_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Serve ``state`` from now on (``ValueError`` if it does not fit: nothing changes).
        Only between requests; every cached prefix is evicted (its KV came from the old
        weights), so the next generations prefill again and count it as recomputed."""
        if self.has_work():
            raise ValueError("weights can only be swapped while no request is in flight")
        copy_state_dict(self.model.module, state)
        self.kv.store.evict_lru(self.kv.store.num_tokens)
        fingerprint = model_fingerprint(self.model.module, self.model.layout)
        self.model = dataclasses.replace(self.model, fingerprint=fingerprint)

    def export_block(self, trajectory_id: str) -> KVBlock | None:
        """The trajectory's KV: its request's (copied if running) or its cached prefix."""
        seq = self._by_trajectory.get(trajectory_id)
        if seq is not None:
            return self.kv.block_of(seq)
        entry = self.kv.store.get(trajectory_id)
        return None if entry is None else entry.payload

    def import_block(self, trajectory_id: str, block: KVBlock) -> None:
        """Make ``block`` the trajectory's cached prefix, evicting LRU prefixes to fit."""
        if trajectory_id in self._by_trajectory:
            raise ValueError(f"trajectory {trajectory_id!r} has a request in flight here")
        if block.num_tokens + 1 > self.options.max_kv_tokens:
            raise ValueError(
                f"KV of {block.num_tokens} tokens exceeds "
                f"max_kv_tokens={self.options.max_kv_tokens}"
            )
        self.kv.store.put(trajectory_id, CacheEntry(block.token_ids, block.to(self.kv.park_device)))
        overflow = self.scheduler.num_committed_tokens() - self.options.max_kv_tokens
        self.kv.store.evict_lru(overflow)

    # Stepping ------------------------------------------------------------------------------

    def has_work(self) -> bool:
        return bool(self.scheduler.running or self.scheduler.waiting)

    def step(self) -> list[GenerationResult]:
        """One scheduling decision, the prefills it admits and one batched decode step."""
        self._counters.num_steps += 1
        out = self.scheduler.schedule()
        # Truncated sequences leave their slots before admissions take slots, and sequences
        # done at admission leave theirs before the decode batch is formed.
        results = [self._finish(seq) for seq in self._carry_out(out)]
        for seq in out.admitted:
            results += [self._finish(done) for done in self._admit(seq)]
        return results + [self._finish(seq) for seq in self._decode()]

    def reset(self) -> list[str]:
        """Forget every request in flight (after a failed step); returns their ids."""
        request_ids = list(self.seqs)
        self.seqs.clear()
        self._by_trajectory.clear()
        self.scheduler.waiting.clear()
        self.scheduler.running.clear()
        self.kv.clear_active()
        return request_ids

    def _carry_out(self, out: SchedulerOutput) -> list[Sequence]:
        for seq in out.dropped:
            self.kv.drop_parked(seq)
        for seq in out.preempted:
            self.kv.park(seq)
        self._counters.num_preemptions += len(out.preempted)
        return list(out.truncated)

    def _admit(self, seq: Sequence) -> list[Sequence]:
        """Slot, parked KV and prefill for an admitted sequence; its first token if it is new."""
        slot = self.kv.restore(seq)
        if seq.num_cached_tokens is None:
            seq.first_admitted_at_s = time.perf_counter()
            seq.num_cached_tokens = seq.num_kv_tokens
        logits = self._prefill(seq, slot) if seq.num_tokens_to_prefill > 0 else None
        if seq.has_pending_token:
            return []
        if seq.request.max_new_tokens == 0 or logits is None:
            seq.finish_reason = "length"
            self.scheduler.remove(seq)
            return [seq]
        return self._append_sampled([seq], logits[None, :])

    def _prefill(self, seq: Sequence, slot: int) -> torch.Tensor:
        start, target = seq.num_kv_tokens, seq.kv_target
        recomputed = max(0, min(target, seq.num_known_tokens) - start)
        started = time.perf_counter()
        logits = self.runner.prefill(slot, seq.context[start:target], start)
        elapsed = time.perf_counter() - started
        seq.num_kv_tokens = target
        seq.num_known_tokens = max(seq.num_known_tokens, target)
        seq.num_recomputed_tokens += recomputed
        seq.prefill_s += elapsed
        self._counters.num_prefilled_tokens += target - start
        self._counters.num_recomputed_tokens += recomputed
        self._counters.prefill_s += elapsed
        self._counters.recompute_s += elapsed * recomputed / (target - start)
        return logits

    def _decode(self) -> list[Sequence]:
        rows: list[Sequence] = list(self.pool.owners)  # type: ignore[arg-type]
        if not rows:
            return []
        started = time.perf_counter()
        logits = self.runner.decode(
            [seq.output_token_ids[-1] for seq in rows], [seq.pending_position for seq in rows]
        )
        for seq in rows:
            seq.num_kv_tokens += 1
            seq.num_known_tokens = max(seq.num_known_tokens, seq.num_kv_tokens)
        finished = self._append_sampled(rows, logits)
        self._counters.add_decode_step(len(rows), time.perf_counter() - started)
        return finished

    def _append_sampled(self, rows: list[Sequence], logits: torch.Tensor) -> list[Sequence]:
        """Sample one token per row, append it, and return the rows that are now done."""
        settings = [
            RowSampling(
                temperature=seq.request.sampling.temperature,
                top_p=seq.request.sampling.top_p,
                seed=seq.seed,
                position=len(seq.context),
            )
            for seq in rows
        ]
        sampled = sample(logits, settings)
        now_s = time.perf_counter()
        finished = []
        for seq, token_id, logprob in zip(rows, sampled.token_ids, sampled.logprobs, strict=True):
            seq.append(token_id, logprob)
            if seq.first_token_at_s is None:
                seq.first_token_at_s = now_s
            reason = seq.finish_reason_after_token()
            if reason is None and len(seq.context) >= self.model.max_positions:
                reason = "length"
            if reason is not None:
                seq.finish_reason = reason
                self.scheduler.remove(seq)
                finished.append(seq)
        return finished

    def _finish(self, seq: Sequence) -> GenerationResult:
        """Result of a sequence the scheduler no longer holds; its KV becomes the cached prefix."""
        self.kv.cache_prefix(seq)
        del self.seqs[seq.request_id]
        del self._by_trajectory[seq.trajectory_id]
        return seq.result(time.perf_counter())

    # Introspection -----------------------------------------------------------------------

    def load(self) -> EngineLoad:
        used = self.scheduler.num_used_tokens()
        return EngineLoad(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            kv_usage=min(1.0, used / self.options.max_kv_tokens),
            num_cached_trajectories=len(self.kv.store),
        )

    def stats(self) -> EngineStats:
        return self._counters.snapshot(self.kv.stats, num_evictions=self.kv.store.num_evictions)
