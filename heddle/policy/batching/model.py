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
  perfect output-length estimate, so a running job is never retracted; every system simulated
  gets the same (optimistic) engine.
- Admission prefills what the trajectory's prefix cache lacks, in one prefill batch that stalls
  decoding (SGLang's default prefill-first iteration); a job whose cache was lost re-prefills
  its whole context and counts those tokens as recomputed.
- With ``preemptive`` set, a waiting job that beats the lowest running ones by the margin of
  ``heddle.policy.preemption`` preempts just enough of them to fit (PPS, paper s.4.2). A
  preempted job keeps its KV as a prefix-cache record and resumes without recompute, unless the
  record is evicted because running contexts need the memory (``config.eviction`` orders the
  victims: least recently used, as SGLang, or lowest priority; see ``cache``).
- Finished trajectories keep their context as a prefix-cache record until ``release``.
- Decoding is simulated in chunks between membership changes: a step of ``b`` running jobs costs
  ``cost.decode_step_s(b, total_context)`` and adds one token to each, so a chunk of ``k`` steps
  has a closed-form duration (see ``decode_span_s``). Jobs join or leave only at step boundaries:
  after ``advance(now)`` or a mutator the model's state is exact at ``clock_s >= now`` (the step
  in flight at ``now`` completes first), which is why a finish may be dated after ``now``;
  ``advance`` reports each finish once its time has come.
"""

from __future__ import annotations

import heapq
import math

from heddle.policy.batching.cache import PrefixCache, make_cache
from heddle.policy.batching.jobs import (
    BatchingConfig,
    BatchLoad,
    CapacityError,
    FinishedGeneration,
    GenerationJob,
    JobRecord,
    JobState,
)
from heddle.policy.batching.span import decode_span_s, steps_covering
from heddle.policy.cost_model import CostModel


class BatchingModel:
    """One worker's continuous batching on a caller-driven clock (see the module docstring)."""

    def __init__(self, cost: CostModel, config: BatchingConfig | None = None) -> None:
        self.cost = cost
        self.config = config or BatchingConfig()
        self.max_kv_tokens = cost.max_kv_tokens
        self.clock_s = 0.0
        self.num_steps = 0
        """Decode steps run so far; a running job's context is ``base + num_steps``."""
        self._jobs: dict[str, JobRecord] = {}
        self._active_traj: dict[str, str] = {}
        self._running: dict[str, JobRecord] = {}
        self._waiting_heap: list[tuple[float, int, int, JobRecord]] = []
        self._running_heap: list[tuple[float, int, int, JobRecord]] = []
        """Running jobs by (priority, -arrival): the preemption victims' order (lazy)."""
        self._membership = 0
        """Bumped whenever the running set changes (invalidates the memoised chunk)."""
        self._chunk_key = (-1, -1)
        self._chunk = (0, 0.0)
        self._resident_heap: list[tuple[float, int, int, JobRecord]] = []
        """The waiting jobs whose trajectory held a prefix here when they queued."""
        self._num_waiting = 0
        self._finish_heap: list[tuple[int, int, int, JobRecord]] = []
        self._running_context = 0
        self._reserved = 0
        self._cache: PrefixCache = make_cache(self.config.eviction)
        self._outbox: list[FinishedGeneration] = []
        self._num_arrivals = 0
        self._dirty = False
        """Jobs may be admissible at ``clock_s``: admissions wait until time moves past the
        boundary or someone looks, so jobs submitted at one instant share a prefill batch."""
        self.num_preemptions = 0
        self.num_evicted_tokens = 0
        self.num_recomputed_tokens = 0
        self.busy_s = 0.0
        self.timeline: list[tuple[float, int, int]] = []

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
        state = JobRecord(job, self._num_arrivals, now)
        self._jobs[job.request_id] = state
        self._active_traj[job.traj_id] = job.request_id
        self._cache.reprioritize(job.traj_id, job.priority)
        self._push_waiting(state)
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
        self._cache.reprioritize(state.job.traj_id, priority)
        if state.state is JobState.WAITING:
            self._num_waiting -= 1
            self._push_waiting(state)
        elif state.state is JobState.RUNNING:
            entry = (priority, -state.arrival, state.epoch, state)
            heapq.heappush(self._running_heap, entry)
        self._dirty = True
        return True

    def preempt(self, request_id: str, now: float) -> bool:
        """Move a running job back to the waiting queue, keeping its KV; False if not running."""
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
            self._stop_running(state)
            self._cache_put(state.job.traj_id, state.context, state.priority)
        else:
            self._num_waiting -= 1
        state.state = JobState.DONE
        state.epoch += 1
        self._forget(state)
        self._dirty = True
        return state.generated

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
        return self.clock_s + self._next_chunk()[1]

    def release(self, traj_id: str) -> int:
        """Drop a trajectory's cached prefix (completed or moved away); returns its tokens."""
        return self._cache.pop(traj_id)

    def import_cache(
        self, traj_id: str, num_tokens: int, now: float, priority: float = 0.0
    ) -> None:
        """Install a transferred prefix cache for a trajectory (migration with KV transfer)."""
        if num_tokens < 0:
            raise ValueError("num_tokens must be >= 0")
        self._sync(now)
        self.release(traj_id)
        self._cache.put(traj_id, num_tokens, priority)
        self._evict()

    def cached_tokens(self, traj_id: str) -> int:
        return self._cache.get(traj_id)

    def is_in_flight(self, request_id: str) -> bool:
        return request_id in self._jobs

    def load(self) -> BatchLoad:
        return BatchLoad(
            num_running=len(self._running),
            num_waiting=self._num_waiting,
            num_kv_tokens=self._running_context + self._cache.total_tokens,
            max_kv_tokens=self.max_kv_tokens,
            num_cached_trajectories=len(self._cache),
        )

    def invariant_violations(self) -> list[str]:
        """Broken invariants (empty when the model is consistent); tests call it every step."""
        running = list(self._running.values())
        waiting = [job for job in self._jobs.values() if job.state is JobState.WAITING]
        live = sum(job.context + self.num_steps - job.start_step for job in running)
        checks = {
            "too many running": len(running) <= self.config.max_running,
            "running context drifted": live == self._running_context,
            "reservation drifted": self._reserved == sum(job.final_context for job in running),
            "reservation over capacity": self._reserved <= self.max_kv_tokens,
            "KV over capacity": self._running_context + self._cache.total_tokens
            <= self.max_kv_tokens,
            "cache total drifted": self._cache.total_tokens == sum(self._cache.records().values()),
            "waiting count drifted": self._num_waiting == len(waiting),
            "overshot a target": all(
                job.generated + self.num_steps - job.start_step <= job.job.num_output_tokens
                for job in running
            ),
            "runnable job left waiting": self._dirty or self._is_blocked(),
        }
        return [name for name, holds in checks.items() if not holds]

    # ---- clock ---------------------------------------------------------------------------------

    def _next_chunk(self) -> tuple[int, float]:
        """Steps to the next finish and their duration, memoised until the batch changes."""
        key = (self.num_steps, self._membership)
        if self._chunk_key != key:
            steps = self._finish_heap_min() - self.num_steps
            self._chunk = (steps, self._span_s(steps) if steps else 0.0)
            self._chunk_key = key
        return self._chunk

    def _span_s(self, num_steps: int) -> float:
        return decode_span_s(self.cost, len(self._running), self._running_context, num_steps)

    def _sync(self, now: float) -> None:
        """Bring the state to the first step boundary at or after ``now``. Finishes due at a
        boundary are processed there (they reach the outbox dated at the boundary)."""
        while True:
            if self._dirty and self.clock_s < now:
                self._flush()
            if not self._running:
                break
            steps, span_s = self._next_chunk()
            if steps:
                if self.clock_s + span_s > now:
                    if self.clock_s >= now:
                        return
                    steps = steps_covering(
                        self.cost,
                        len(self._running),
                        self._running_context,
                        now - self.clock_s,
                        steps,
                    )
                    span_s = self._span_s(steps)
                self._decode(steps, span_s)
            if self._finish_due():
                self._dirty = True
        self.clock_s = max(self.clock_s, now)

    def _flush(self) -> None:
        if self._dirty:
            self._dirty = False
            self._schedule()

    def _decode(self, num_steps: int, span_s: float) -> None:
        self.clock_s += span_s
        self.busy_s += span_s
        self.num_steps += num_steps
        self._running_context += num_steps * len(self._running)
        self._evict()

    def _finish_heap_min(self) -> int:
        heap = self._finish_heap
        while heap[0][2] != heap[0][3].epoch:
            heapq.heappop(heap)
        return heap[0][0]

    # ---- membership ----------------------------------------------------------------------------

    def _push_waiting(self, state: JobRecord) -> None:
        state.epoch += 1
        self._num_waiting += 1
        entry = (-state.priority, state.arrival, state.epoch, state)
        heapq.heappush(self._waiting_heap, entry)
        if self._cache.get(state.job.traj_id):
            heapq.heappush(self._resident_heap, entry)

    def _peek_waiting(self) -> JobRecord | None:
        heap = self._waiting_heap
        while heap and heap[0][2] != heap[0][3].epoch:
            heapq.heappop(heap)
        return heap[0][3] if heap else None

    def _peek_resident(self) -> JobRecord | None:
        """The best waiting job whose trajectory still holds a prefix here."""
        heap = self._resident_heap
        while heap and (
            heap[0][2] != heap[0][3].epoch or not self._cache.get(heap[0][3].job.traj_id)
        ):
            heapq.heappop(heap)
        return heap[0][3] if heap else None

    def _schedule(self) -> None:
        """Admit waiting jobs (``_pick``) until none can start, then prefill them together."""
        admitted: list[JobRecord] = []
        while (job := self._pick()) is not None:
            self._num_waiting -= 1
            self._admit(job)  # its queue entries go stale with its epoch
            admitted.append(job)
        if admitted:
            self._prefill(admitted)
        if self.config.record_timeline:
            self.timeline.append((self.clock_s, len(self._running), self._num_waiting))

    def _pick(self) -> JobRecord | None:
        """The next job to admit, preempting for it where the policy allows; None if none can.

        Strict priority order, with one exception: a head whose trajectory holds no prefix here
        may not evict resident prefixes (under priority eviction), and only residents can free
        them, so a resident job that fits may pass it.
        """
        head = self._peek_waiting()
        if head is None:
            return None
        if self._fits(head, 0, 0):
            return head
        victims = self._victims_for(head) if self.config.preemptive else None
        if victims is not None:
            for victim in victims:
                self._preempt(victim)
            return head
        resident = self._peek_resident()
        if resident is not None and resident is not head and self._fits(resident, 0, 0):
            return resident
        return None

    def _is_blocked(self) -> bool:
        """No waiting job can start now (what ``_pick`` would find, without side effects)."""
        head = self._peek_waiting()
        if head is None:
            return True
        if self._fits(head, 0, 0):
            return False
        if self.config.preemptive and self._victims_for(head) is not None:
            return False
        resident = self._peek_resident()
        return resident is None or resident is head or not self._fits(resident, 0, 0)

    def _fits(self, state: JobRecord, freed_slots: int, freed_tokens: int) -> bool:
        if len(self._running) - freed_slots >= self.config.max_running:
            return False
        needed = self._reserved - freed_tokens + state.final_context
        if needed > self.max_kv_tokens:
            return False
        if not self._running:
            return True  # an idle worker evicts what it must: idling would help no one
        # Prefixes the job may not evict (under priority eviction) must fit beside it.
        protected = self._cache.protected_tokens(state.priority, state.job.traj_id)
        return needed + protected <= self.max_kv_tokens

    def _victims_for(self, head: JobRecord) -> list[JobRecord] | None:
        """The fewest lowest-priority running jobs whose preemption lets ``head`` in, or None."""
        beats = self.config.preemption.beats
        lowest = self._lowest_running()
        if lowest is None or not beats(head.priority, lowest.priority):
            return None  # the common case, without a scan of the batch
        # Preempting every running job frees at most their unfinished reservations.
        if not self._fits(head, len(self._running), self._reserved - self._running_context):
            return None
        candidates = sorted(
            (job for job in self._running.values() if beats(head.priority, job.priority)),
            key=lambda job: (job.priority, -job.arrival),
        )
        # A preempted job keeps its KV (paper s.4.2): only the room reserved for the tokens it
        # has yet to generate is freed. Preempting to take its KV would only evict it.
        freed_tokens = 0
        for count, victim in enumerate(candidates, start=1):
            live_context = victim.context + self.num_steps - victim.start_step
            freed_tokens += victim.final_context - live_context
            if self._fits(head, count, freed_tokens):
                return candidates[:count]
        return None

    def _lowest_running(self) -> JobRecord | None:
        heap = self._running_heap
        while heap and (
            heap[0][3].state is not JobState.RUNNING
            or heap[0][2] != heap[0][3].epoch
            or heap[0][0] != heap[0][3].priority
        ):
            heapq.heappop(heap)
        return heap[0][3] if heap else None

    def _admit(self, state: JobRecord) -> None:
        """Move a waiting job into the batch; its prefill runs with the admission batch."""
        cached = min(self.release(state.job.traj_id), state.context)
        if state.cached < 0:
            state.cached = cached
        # Before the first admission the new tokens were never computed; every other token of
        # the context was, so prefilling it again is recompute.
        computed_before = state.context - (state.job.num_new_tokens if state.generated == 0 else 0)
        lost = max(0, computed_before - cached)
        state.recomputed += lost
        self.num_recomputed_tokens += lost
        state.prefill_tokens = state.context - cached
        state.queue_s += self.clock_s - state.wait_since
        state.state = JobState.RUNNING
        state.epoch += 1
        state.start_step = self.num_steps
        state.finish_step = self.num_steps + state.remaining
        self._running[state.job.request_id] = state
        self._running_context += state.context
        self._reserved += state.final_context
        heapq.heappush(self._finish_heap, (state.finish_step, state.arrival, state.epoch, state))
        heapq.heappush(self._running_heap, (state.priority, -state.arrival, state.epoch, state))
        self._membership += 1

    def _prefill(self, admitted: list[JobRecord]) -> None:
        num_tokens = sum(state.prefill_tokens for state in admitted)
        prefill_s = self.cost.prefill_s(num_tokens)
        self.clock_s += prefill_s
        self.busy_s += prefill_s
        for state in admitted:
            state.prefill_s += prefill_s
            state.run_since = self.clock_s

    def _stop_running(self, state: JobRecord) -> None:
        """Take a running job out of the batch, accounting its decode time and tokens."""
        del self._running[state.job.request_id]
        self._membership += 1
        generated_now = self.num_steps - state.start_step
        state.generated += generated_now
        live_context = state.context + generated_now
        state.context = live_context
        state.decode_s += self.clock_s - state.run_since
        self._running_context -= live_context
        self._reserved -= state.final_context

    def _preempt(self, state: JobRecord) -> None:
        self._stop_running(state)
        state.state = JobState.WAITING
        state.num_preemptions += 1
        self.num_preemptions += 1
        state.wait_since = self.clock_s
        self._cache_put(state.job.traj_id, state.context, state.priority)
        self._push_waiting(state)

    def _finish_due(self) -> bool:
        """Finish the jobs whose last token is out; True if any did."""
        finished = False
        heap = self._finish_heap
        while heap and heap[0][0] <= self.num_steps:
            _, _, epoch, state = heapq.heappop(heap)
            if epoch != state.epoch:
                continue
            self._stop_running(state)
            state.state = JobState.DONE
            state.epoch += 1
            self._forget(state)
            self._cache_put(state.job.traj_id, state.context, state.priority)
            self._outbox.append(self._finished(state))
            finished = True
        return finished

    def _finished(self, state: JobRecord) -> FinishedGeneration:
        return FinishedGeneration(
            request_id=state.job.request_id,
            traj_id=state.job.traj_id,
            num_output_tokens=state.generated,
            num_context_tokens=state.context,
            submitted_at=state.submitted_at,
            finished_at=self.clock_s,
            queue_s=state.queue_s,
            prefill_s=state.prefill_s,
            decode_s=state.decode_s,
            num_preemptions=state.num_preemptions,
            num_cached_tokens=max(0, state.cached),
            num_recomputed_tokens=state.recomputed,
        )

    def _forget(self, state: JobRecord) -> None:
        del self._jobs[state.job.request_id]
        del self._active_traj[state.job.traj_id]

    # ---- prefix cache --------------------------------------------------------------------------

    def _cache_put(self, traj_id: str, num_tokens: int, priority: float) -> None:
        self._cache.put(traj_id, num_tokens, priority)
        self._evict()

    def _evict(self) -> None:
        """Evict prefixes (in the cache policy's order) until running contexts and cache fit."""
        cache = self._cache
        while len(cache) and self._running_context + cache.total_tokens > self.max_kv_tokens:
            self.num_evicted_tokens += cache.evict_one()
