"""What happens at one step boundary of a worker's batch: admission, prefill, leaving the batch,
and the prefix cache those moves fill and evict.

``BatchScheduler`` owns the batch's state (waiting queue, running batch, prefix cache, the jobs
in flight and the counters); ``heddle.policy.batching.model.BatchingModel`` adds the clock and
the public API on top (the contract is in that module's docstring). Time passes here only for
an admission's prefill.
"""

from __future__ import annotations

from heddle.policy.batching.cache import PrefixCache, make_cache
from heddle.policy.batching.jobs import (
    BatchingConfig,
    FinishedGeneration,
    JobRecord,
    JobState,
)
from heddle.policy.batching.queues import RunningBatch, WaitQueue
from heddle.policy.batching.victims import choose_victims
from heddle.policy.cost.model import CostModel


class BatchScheduler:
    """The state of one worker's batch and its moves at a step boundary."""

    def __init__(self, cost: CostModel, config: BatchingConfig | None = None) -> None:
        self.cost = cost
        self.config = config or BatchingConfig()
        self.max_kv_tokens = cost.max_kv_tokens
        self.clock_s = 0.0
        self.num_steps = 0
        """Decode steps run so far; a running job's context is ``base + num_steps``."""
        self._jobs: dict[str, JobRecord] = {}
        self._active_traj: dict[str, str] = {}
        self._waiting = WaitQueue()
        self._running = RunningBatch()
        self._cache: PrefixCache = make_cache(self.config.cache, self.config.page_tokens)
        self._outbox: list[FinishedGeneration] = []
        self._num_arrivals = 0
        self.num_preemptions = 0
        self.num_evicted_tokens = 0
        self.num_recomputed_tokens = 0
        self.busy_s = 0.0
        self.timeline: list[tuple[float, int, int]] = []

    # ---- admission -----------------------------------------------------------------------------

    def _schedule(self) -> None:
        """Admit waiting jobs (``_pick``) until none can start, then prefill them together."""
        admitted: list[JobRecord] = []
        while (job := self._pick()) is not None:
            self._waiting.remove(job)
            self._admit(job)
            admitted.append(job)
        if admitted:
            self._evict()  # the admitted contexts take their KV before they prefill
            self._prefill(admitted)
            self._cache.end_batch()
        if self.config.record_timeline:
            self.timeline.append((self.clock_s, len(self._running), len(self._waiting)))

    def _pick(self) -> JobRecord | None:
        """The next job to admit in strict priority order, preempting for it where the policy
        allows; None if it cannot start."""
        head = self._waiting.peek()
        if head is None:
            return None
        if self._fits(head, 0, 0):
            return head
        victims = self._victims_for(head) if self.config.preemptive else None
        if victims is None:
            return None
        for victim in victims:
            self._preempt(victim)
        return head

    def _is_blocked(self) -> bool:
        """No waiting job can start now (what ``_pick`` would find, without side effects)."""
        head = self._waiting.peek()
        if head is None or self._fits(head, 0, 0):
            return head is None
        return not (self.config.preemptive and self._victims_for(head) is not None)

    def _fits(self, state: JobRecord, freed_slots: int, freed_tokens: int) -> bool:
        """Whether the job's final context fits beside the running ones' reservations (less
        ``freed_tokens``) and the shared prompt nodes they hold (which cannot be evicted)."""
        if len(self._running) - freed_slots >= self.config.max_running:
            return False
        job, cache = state.job, self._cache
        needed = self._running.reserved_tokens - freed_tokens + state.final_context
        if cache.is_locked(job.group_id, job.num_prompt_tokens):
            needed -= state.shared  # its prompt is held already (and counted as locked)
        return needed + cache.locked_tokens <= self.max_kv_tokens

    def _victims_for(self, head: JobRecord) -> list[JobRecord] | None:
        config = self.config
        return choose_victims(
            head,
            self._running,
            self._cache,
            config.preemption,
            config.preemption_keeps_kv,
            self.num_steps,
            lambda slots, tokens: self._fits(head, slots, tokens),
        )

    def _admit(self, state: JobRecord) -> None:
        """Move a waiting job into the batch; its prefill runs with the admission batch."""
        job = state.job
        cached = min(
            self._cache.take(job.traj_id, job.group_id, job.num_prompt_tokens), state.context
        )
        # Before the first admission the new tokens were never computed; every other token of
        # the context was, so prefilling it again is recompute. After it, all of it was.
        is_first = state.cached < 0
        if is_first:
            state.cached = cached
        computed_before = state.context - (job.num_new_tokens if is_first else 0)
        lost = max(0, computed_before - cached)
        state.recomputed += lost
        self.num_recomputed_tokens += lost
        state.prefill_tokens = state.context - cached
        state.queue_s += self.clock_s - state.wait_since
        self._running.add(state, self.num_steps)

    def _prefill(self, admitted: list[JobRecord]) -> None:
        """One prefill forward for the admitted jobs: each prefills what its cache lacks,
        attending to what it had (the cost of a batch is the sum of its sequences')."""
        prefill_s = sum(
            self.cost.prefill_s(state.prefill_tokens, state.context - state.prefill_tokens)
            for state in admitted
        )
        self.clock_s += prefill_s
        self.busy_s += prefill_s
        for state in admitted:
            state.prefill_s += prefill_s
            state.run_since = self.clock_s

    # ---- leaving the batch ---------------------------------------------------------------------

    def _stop_running(self, state: JobRecord) -> int:
        """Take a running job out of the batch, accounting its decode time and tokens; returns
        the context it was admitted with (this run's start)."""
        admitted_context = state.context
        self._running.remove(state, self.num_steps)
        state.decode_s += self.clock_s - state.run_since
        return admitted_context

    def _preempt(self, state: JobRecord) -> None:
        admitted_context = self._stop_running(state)
        state.num_preemptions += 1
        self.num_preemptions += 1
        state.wait_since = self.clock_s
        if self.config.preemption_keeps_kv:
            self._cache_put(state, admitted_context)
        else:  # SGLang's retract: only what the tree held since the admission survives
            self._cache_put(state, admitted_context, admitted_context)
        self._waiting.push(state)

    def _finish_due(self) -> bool:
        """Finish the jobs whose last token is out; True if any did."""
        finished = self._running.pop_finished(self.num_steps)
        for state in finished:
            admitted_context = self._stop_running(state)
            state.state = JobState.DONE
            self._forget(state)
            self._cache_put(state, admitted_context)
            self._outbox.append(self._finished(state))
        return bool(finished)

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

    def _cache_put(
        self, state: JobRecord, admitted_context: int, num_tokens: int | None = None
    ) -> None:
        """A job stopped running: its context (or the first ``num_tokens``) becomes a cache
        record, and the shared prompt it held is unlocked."""
        job = state.job
        kept = state.context if num_tokens is None else num_tokens
        cache = self._cache
        cache.put(job.traj_id, job.group_id, job.num_prompt_tokens, kept, admitted_context)
        if state.shared:
            cache.unlock(job.group_id, job.num_prompt_tokens)
        self._evict()

    def _evict(self) -> None:
        """Evict (in the cache's order) until running contexts and cache fit; locked prompt
        nodes cannot go, but always fit beside the reservations (``_fits``)."""
        cache, batch = self._cache, self._running
        while batch.kv_tokens + cache.total_tokens > self.max_kv_tokens:
            freed = cache.evict_one()
            if not freed:
                break
            self.num_evicted_tokens += freed
