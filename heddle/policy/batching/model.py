"""The continuous-batching model of one inference worker (one model on ``tp_degree`` GPUs).

The simulator runs it on a virtual clock and the live ``sim`` engine runs it, unchanged, in
scaled real time. The caller owns the clock: every mutator takes ``now`` and the model never
reads a clock. Contract:

- A ``GenerationJob`` is one generation step of a trajectory: its whole context, how many of
  those tokens are new to the trajectory (prompt or tool output), how many tokens to generate,
  and a priority (larger runs first).
- Waiting jobs are admitted by (priority desc, arrival, id) while the running set has a free slot
  (``max_running``) and KV room: the final contexts of the running jobs (context + tokens still
  to generate) must fit in ``cost.max_kv_tokens``. This is SGLang's token reservation with a
  perfect output-length estimate, so a running job is never retracted for memory (only by
  priority preemption); every system simulated gets the same (optimistic) engine.
- Admission prefills what the trajectory's prefix cache lacks, in one prefill batch that stalls
  decoding (SGLang's default prefill-first iteration), each job's part costing more the longer
  the context its new tokens attend to (``CostModel.prefill_s``); a job whose cache was lost
  re-prefills its whole context and counts those tokens as recomputed.
- With ``preemptive`` set, a waiting job that beats the lowest running ones by the margin of
  ``heddle.policy.scheduling.preemption`` preempts just enough of them to fit (PPS, paper s.4.2).
  With ``preemption_keeps_kv`` a preempted job keeps its KV as a prefix-cache record and resumes
  without recompute unless the record is evicted; without it (SGLang's retract) only the context it
  was admitted with stays cached and the tokens it generated since are recomputed on resume.
- Finished trajectories keep their context as a prefix-cache record until ``release``; under KV
  pressure the cache (``config.cache``: per-trajectory LRU, or SGLang's radix tree with shared
  group prompts and partial hits; see ``cache`` and ``radix``) evicts least recently used first.
- A job with ``num_output_tokens == 0`` only prefills (SGLang's ``max_new_tokens: 0``): it
  finishes at the end of its prefill and leaves its context in the cache (a warm-up).
- Decoding is simulated in chunks between membership changes: a step of ``b`` running jobs costs
  ``cost.decode_step_s(b, total_context)`` and adds one token to each, so a chunk of ``k`` steps
  has a closed-form duration (see ``decode_span_s``). Jobs join or leave only at step boundaries:
  after ``advance(now)`` or a mutator the model's state is exact at ``clock_s >= now`` (the step
  in flight at ``now`` completes first), which is why a finish may be dated after ``now``;
  ``advance`` reports each finish once its time has come.
"""

from __future__ import annotations

import math
from dataclasses import replace

from heddle.policy.batching.cache import make_cache
from heddle.policy.batching.jobs import (
    BatchingConfig,
    BatchLoad,
    CapacityError,
    FinishedGeneration,
    GenerationJob,
    JobRecord,
    JobState,
)
from heddle.policy.batching.queues import job_order
from heddle.policy.batching.scheduler import BatchScheduler
from heddle.policy.batching.span import Chunk, decode_span_s, plan_chunk, steps_covering
from heddle.policy.cost.model import CostModel


class BatchingModel(BatchScheduler):
    """One worker's continuous batching on a caller-driven clock (see the module docstring)."""

    def __init__(self, cost: CostModel, config: BatchingConfig | None = None) -> None:
        super().__init__(cost, config)
        self._chunk_key = (-1, -1)
        self._chunk = Chunk(0, 0.0)
        self._dirty = False
        """Jobs may be admissible at ``clock_s``: admissions wait until time moves past the
        boundary or someone looks, so jobs submitted at one instant share a prefill batch."""

    # ---- public API --------------------------------------------------------------------------

    def submit(self, job: GenerationJob, now: float) -> None:
        """Queue a generation; ``CapacityError`` if its final context can never fit."""
        if job.request_id in self._jobs:
            raise ValueError(f"request {job.request_id!r} is already in flight")
        if job.traj_id in self._active_traj:
            raise ValueError(f"trajectory {job.traj_id!r} already has a generation in flight")
        if job.num_context_tokens + job.num_output_tokens > self.max_kv_tokens:
            raise CapacityError(
                f"job {job.request_id}: final context of "
                f"{job.num_context_tokens + job.num_output_tokens} tokens exceeds the KV capacity "
                f"of {self.max_kv_tokens} tokens"
            )
        self._sync(now)
        self._num_arrivals += 1
        shared = self._cache.shared_tokens(job.group_id, job.num_prompt_tokens)
        state = JobRecord(job, self._num_arrivals, now, shared)
        self._jobs[job.request_id] = state
        self._active_traj[job.traj_id] = job.request_id
        self._waiting.push(state)
        self._dirty = True

    def set_priority(self, request_id: str, priority: float, now: float) -> bool:
        """Change a waiting or running job's priority; False if it is not in flight."""
        if not math.isfinite(priority):
            raise ValueError("priority must be finite")
        self._sync(now)
        state = self._jobs.get(request_id)
        if state is None or state.priority == priority:
            return state is not None
        state.priority = priority
        if state.state is JobState.WAITING:
            self._waiting.remove(state)
            self._waiting.push(state)
        elif state.state is JobState.RUNNING:
            self._running.reprioritize(state)
        self._dirty = True
        return True

    def preempt(self, request_id: str, now: float) -> bool:
        """Move a running job back to the waiting queue (its KV as ``preemption_keeps_kv``
        says); False if not running."""
        self._sync(now)
        state = self._running.get(request_id)
        if state is None:
            return False
        self._preempt(state)
        self._dirty = True
        return True

    def abort(self, request_id: str, now: float) -> int:
        """Drop a job in flight; returns the tokens it had generated (-1 if unknown)."""
        self._sync(now)
        state = self._jobs.get(request_id)
        if state is None:
            return -1
        if state.state is JobState.RUNNING:
            self._cache_put(state, self._stop_running(state))
        else:
            self._waiting.remove(state)
        state.state = JobState.DONE
        self._forget(state)
        self._dirty = True
        return state.generated

    def stop(self, now: float) -> tuple[list[FinishedGeneration], list[FinishedGeneration]]:
        """The engine stops at ``now`` (a re-shard kills it): returns the generations that
        finished by then (by the decode step in flight at ``now``), in time order, and every
        other one in flight, interrupted at ``now``: a result with the tokens it generated so
        far and its time up to ``now`` (a prefill in flight is cut short, its tokens lost).
        Nothing is left in flight; the cache is of no further use (its KV goes with it)."""
        self._sync(now)
        finished, self._outbox = self._outbox, []
        interrupted: list[FinishedGeneration] = []
        for state in sorted(self._jobs.values(), key=lambda s: (s.arrival, s.job.request_id)):
            if state.state is JobState.RUNNING:
                self._stop_running(state)
            else:
                self._waiting.remove(state)
                state.queue_s += self.clock_s - state.wait_since
            state.state = JobState.DONE
            self._forget(state)
            interrupted.append(_cut_to(self._finished(state), now))
        self._dirty = False
        return finished, interrupted

    def advance(self, now: float) -> list[FinishedGeneration]:
        """Run up to ``now``; returns the jobs that finished at or before ``now``, in time order."""
        self._sync(now)
        if not self._outbox or self._outbox[0].finished_at > now:
            return []
        due = [done for done in self._outbox if done.finished_at <= now]
        self._outbox = self._outbox[len(due) :]
        return due

    def next_event_time(self) -> float | None:
        """When the next finish is due if nothing changes (None: nothing in flight). Admissions
        pending at the current boundary are made first."""
        self._flush()
        if self._outbox:
            return self._outbox[0].finished_at
        if not self._running:
            return None
        return self.clock_s + self._next_chunk().span_s

    def release(self, traj_id: str) -> int:
        """Drop a trajectory's own cached prefix (completed or moved away); returns its tokens.
        A shared group prompt stays, as evictable cache."""
        return self._cache.pop(traj_id)

    def import_cache(
        self,
        traj_id: str,
        num_tokens: int,
        now: float,
        *,
        group_id: str = "",
        num_prompt_tokens: int = 0,
    ) -> None:
        """Install a transferred prefix cache for a trajectory (migration with KV transfer)."""
        if not 0 <= num_prompt_tokens <= num_tokens:
            raise ValueError("need 0 <= num_prompt_tokens <= num_tokens")
        self._sync(now)
        self._cache.put(traj_id, group_id, num_prompt_tokens, num_tokens)
        self._evict()

    def invalidate_cache(self, now: float) -> int:
        """Drop every cached prefix, shared prompts included (new weights make all KV stale; the
        next step of each trajectory re-prefills its context, counted as recomputed); returns the
        tokens dropped. ``ValueError`` while a generation is in flight (swap between them)."""
        self._sync(now)
        if self._jobs:
            raise ValueError("cannot invalidate the cache while generations are in flight")
        dropped = self._cache.total_tokens
        self._cache = make_cache(self.config.cache, self.config.page_tokens)
        return dropped

    def cached_tokens(self, traj_id: str) -> int:
        return self._cache.get(traj_id)

    def running_ids(self) -> list[str]:
        """The jobs in the batch now (admissions pending at this boundary made first), in the
        serving order."""
        self._flush()
        return [job.job.request_id for job in sorted(self._running, key=job_order)]

    def load(self) -> BatchLoad:
        return BatchLoad(
            num_running=len(self._running),
            num_waiting=len(self._waiting),
            num_kv_tokens=self._running.kv_tokens + self._cache.total_tokens,
            max_kv_tokens=self.max_kv_tokens,
            num_cached_trajectories=len(self._cache),
        )

    def invariant_violations(self) -> list[str]:
        """Broken invariants (empty when the model is consistent); tests call it every step."""
        running = list(self._running)
        batch, cache = self._running, self._cache
        live = sum(job.context + self.num_steps - job.start_step for job in running)
        reserved = sum(job.final_context - job.shared for job in running)
        num_waiting = sum(job.state is JobState.WAITING for job in self._jobs.values())
        checks = {
            "too many running": len(running) <= self.config.max_running,
            "running context drifted": live == batch.live_tokens,
            "shared tokens drifted": batch.shared_tokens == sum(job.shared for job in running),
            "reservation drifted": batch.reserved_tokens == reserved,
            "reservation over capacity": (
                batch.reserved_tokens + cache.locked_tokens <= self.max_kv_tokens
            ),
            "KV over capacity": batch.kv_tokens + cache.total_tokens <= self.max_kv_tokens,
            "cache total drifted": cache.total_tokens == cache.recount(),
            "locked over cache": 0 <= cache.locked_tokens <= cache.total_tokens,
            "waiting count drifted": len(self._waiting) == num_waiting,
            "overshot a target": all(
                job.generated + self.num_steps - job.start_step <= job.job.num_output_tokens
                for job in running
            ),
            "runnable job left waiting": self._dirty or self._is_blocked(),
        }
        return [name for name, holds in checks.items() if not holds]

    # ---- clock ---------------------------------------------------------------------------------

    def _next_chunk(self) -> Chunk:
        """The steps to the next finish, memoised until the batch changes."""
        key = (self.num_steps, self._running.membership)
        if self._chunk_key != key:
            steps = self._running.next_finish_step() - self.num_steps
            batch = self._running
            self._chunk = plan_chunk(self.cost, len(batch), batch.live_tokens, steps)
            self._chunk_key = key
        return self._chunk

    def _sync(self, now: float) -> None:
        """Bring the state to the first step boundary at or after ``now``. Finishes due at a
        boundary are processed there (they reach the outbox dated at the boundary)."""
        while True:
            if self._dirty and self.clock_s < now:
                self._flush()
            if not self._running:
                break
            chunk = self._next_chunk()
            steps, span_s = chunk.num_steps, chunk.span_s
            if steps:
                if self.clock_s + span_s > now:
                    if self.clock_s >= now:
                        return
                    steps, span_s = self._partial(chunk, now - self.clock_s)
                self._decode(steps, span_s)
            if self._finish_due():
                self._dirty = True
        self.clock_s = max(self.clock_s, now)

    def _partial(self, chunk: Chunk, duration_s: float) -> tuple[int, float]:
        """The part of ``chunk`` up to the step boundary at or after ``duration_s``."""
        if chunk.is_linear:
            steps = chunk.steps_covering(duration_s)
            return steps, chunk.prefix_span_s(steps)
        batch = self._running
        steps = steps_covering(
            self.cost, len(batch), batch.live_tokens, duration_s, chunk.num_steps
        )
        return steps, decode_span_s(self.cost, len(batch), batch.live_tokens, steps)

    def _flush(self) -> None:
        if self._dirty:
            self._dirty = False
            self._schedule()

    def _decode(self, num_steps: int, span_s: float) -> None:
        self.clock_s += span_s
        self.busy_s += span_s
        self.num_steps += num_steps
        self._running.grow(num_steps)
        self._evict()


def _cut_to(result: FinishedGeneration, now: float) -> FinishedGeneration:
    """``result`` ended at ``now`` rather than at the clock past it (an admission's prefill in
    flight moved the clock beyond ``now``): the time past ``now`` comes off its decode, then
    its prefill, then its queue."""
    excess = result.finished_at - max(now, result.submitted_at)
    if excess <= 0:
        return result
    parts = [result.decode_s, result.prefill_s, result.queue_s]
    for index, part_s in enumerate(parts):
        taken = min(part_s, excess)
        parts[index] -= taken
        excess -= taken
    return replace(
        result,
        finished_at=max(now, result.submitted_at),
        decode_s=parts[0],
        prefill_s=parts[1],
        queue_s=parts[2],
    )
