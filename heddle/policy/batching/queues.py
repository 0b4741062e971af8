"""The two job sets of a batching model, each owning its orderings and sums.

Heaps are lazy: an entry is valid while its job's ``epoch`` is the one it was pushed with, and
whoever moves a job between sets bumps the epoch (``WaitQueue.push``/``remove`` and
``RunningBatch.add``/``remove`` do).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from heddle.policy.batching.jobs import JobRecord, JobState
from heddle.policy.scheduling.preemption import OrderKey, request_order

Entry = tuple[float, int, int, JobRecord]
WaitEntry = tuple[OrderKey, int, JobRecord]


def job_order(job: JobRecord) -> OrderKey:
    """The job's place in the serving order
    (``heddle.policy.scheduling.preemption.request_order``)."""
    return request_order(job.priority, job.arrival, job.job.request_id)


class WaitQueue:
    """Waiting jobs in the serving order (``job_order``)."""

    def __init__(self) -> None:
        self._heap: list[WaitEntry] = []
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, job: JobRecord) -> None:
        job.epoch += 1
        job.state = JobState.WAITING
        self._size += 1
        heapq.heappush(self._heap, (job_order(job), job.epoch, job))

    def remove(self, job: JobRecord) -> None:
        """The job leaves the queue (admitted, aborted or about to be re-pushed)."""
        job.epoch += 1
        self._size -= 1

    def peek(self) -> JobRecord | None:
        heap = self._heap
        while heap and heap[0][1] != heap[0][2].epoch:
            heapq.heappop(heap)
        return heap[0][2] if heap else None


class RunningBatch:
    """Running jobs with their finish order (in decode steps), their preemption order (lowest
    priority, latest arrival first), their contexts (``live_tokens``, what decoding attends to)
    and the KV they reserve (final contexts) and hold (``kv_tokens``); a job's tokens in a shared
    prompt node (``JobRecord.shared``) are the cache's KV, not the batch's."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobRecord] = {}
        self._finish: list[tuple[int, int, int, JobRecord]] = []
        self._by_priority: list[Entry] = []
        self.reserved_tokens = 0
        self.live_tokens = 0
        self.shared_tokens = 0
        """Tokens of ``live_tokens`` held in shared prompt nodes (the cache counts their KV)."""
        self.membership = 0
        """Bumped whenever the set changes (memoised chunks depend on it)."""

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[JobRecord]:
        return iter(self._jobs.values())

    def get(self, request_id: str) -> JobRecord | None:
        return self._jobs.get(request_id)

    def add(self, job: JobRecord, num_steps: int) -> None:
        job.epoch += 1
        job.state = JobState.RUNNING
        job.start_step = num_steps
        job.finish_step = num_steps + job.remaining
        self._jobs[job.job.request_id] = job
        self.live_tokens += job.context
        self.shared_tokens += job.shared
        self.reserved_tokens += job.final_context - job.shared
        self.membership += 1
        heapq.heappush(self._finish, (job.finish_step, job.arrival, job.epoch, job))
        self.reprioritize(job)

    def remove(self, job: JobRecord, num_steps: int) -> None:
        """Take a job out, folding the tokens it generated into its context."""
        del self._jobs[job.job.request_id]
        generated = num_steps - job.start_step
        job.generated += generated
        job.context += generated
        job.epoch += 1
        self.live_tokens -= job.context
        self.shared_tokens -= job.shared
        self.reserved_tokens -= job.final_context - job.shared
        self.membership += 1

    @property
    def kv_tokens(self) -> int:
        """KV the running jobs hold themselves (their contexts less the shared prompts)."""
        return self.live_tokens - self.shared_tokens

    def reprioritize(self, job: JobRecord) -> None:
        # (priority, -arrival) is the reverse of ``job_order``: arrivals are unique in a model,
        # so the id never decides and a min-heap on this pair pops the first victim.
        heapq.heappush(self._by_priority, (job.priority, -job.arrival, job.epoch, job))

    def grow(self, num_steps: int) -> None:
        """Every running job generated ``num_steps`` more tokens."""
        self.live_tokens += num_steps * len(self._jobs)

    def next_finish_step(self) -> int:
        heap = self._finish
        while heap[0][2] != heap[0][3].epoch:
            heapq.heappop(heap)
        return heap[0][0]

    def pop_finished(self, num_steps: int) -> list[JobRecord]:
        """Jobs whose last token is out by step ``num_steps`` (still in the set)."""
        done = []
        heap = self._finish
        while heap and heap[0][0] <= num_steps:
            _, _, epoch, job = heapq.heappop(heap)
            if epoch == job.epoch:
                done.append(job)
        return done

    def lowest(self) -> JobRecord | None:
        """The next preemption victim (lowest priority, latest arrival)."""
        return _peek(self._by_priority, lambda job: job.state is JobState.RUNNING)


def _peek(heap: list[Entry], is_valid: Callable[[JobRecord], bool]) -> JobRecord | None:
    """The top valid entry's job, dropping stale entries (moved, or re-prioritised) on the way."""
    while heap:
        key, _, epoch, job = heap[0]
        stale = epoch != job.epoch or key != job.priority
        if not stale and is_valid(job):
            return job
        heapq.heappop(heap)
    return None
