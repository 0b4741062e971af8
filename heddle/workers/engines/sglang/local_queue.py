"""The local admission queue in front of one SGLang server (pure: no I/O, no clock).

SGLang has no API that changes a queued request's priority, so the engine keeps its own queue and
submits at most ``max_running`` requests at once: reprioritising a waiting request is then a local
re-order. The queue implements the Engine protocol's scheduling contract (PPS, docs/paper.md, the
paper's s.4):

- waiting requests are ranked by priority (larger first), then arrival, then id;
- free slots go to the best waiting requests (``AdmitJob``);
- a waiting request that beats the lowest running one (``PreemptionConfig.beats``: by more than
  an absolute and a relative margin) preempts it (``PreemptJob``). The decision itself is the shared
  policy, ``heddle.policy.scheduling.preemption.decide_preemptions``, so this engine preempts
  exactly when the others do. The victim moves to *draining* (its abort is in flight and it still
  holds its slot) and returns to the waiting queue, with its original arrival, when the shell
  reports ``drained``; its slot is reserved meanwhile for one of the best waiting requests, so one
  newcomer never evicts two victims.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from heddle.policy.scheduling.preemption import (
    OrderKey,
    PreemptionConfig,
    RankedRequest,
    decide_preemptions,
    request_order,
)


@dataclass(frozen=True, slots=True)
class AdmitJob:
    job_id: str


@dataclass(frozen=True, slots=True)
class PreemptJob:
    job_id: str


Decision = AdmitJob | PreemptJob


@dataclass(frozen=True, slots=True)
class QueueEntry:
    job_id: str
    priority: float
    arrival: int
    """Order of first submission; kept across preemptions so a victim keeps its place."""

    def rank(self) -> OrderKey:
        """Sort key, best first: the serving order every engine shares (``request_order``)."""
        return request_order(self.priority, self.arrival, self.job_id)

    def ranked(self) -> RankedRequest:
        """The policy's view: one batch slot, ties broken by arrival."""
        return RankedRequest(self.job_id, self.priority, size=1.0, arrival_s=float(self.arrival))


class AdmissionQueue:
    """Waiting, running and draining jobs of one engine, and the decisions that move them."""

    def __init__(
        self, *, max_running: int, preemption: PreemptionConfig = PreemptionConfig()
    ) -> None:
        if max_running < 1:
            raise ValueError(f"max_running must be >= 1, got {max_running}")
        if preemption.min_priority_gap < 0 or preemption.min_relative_gap < 0:
            raise ValueError(f"preemption margins must be >= 0, got {preemption}")
        self.max_running = max_running
        self.preemption = preemption
        self._waiting: dict[str, QueueEntry] = {}
        self._running: dict[str, QueueEntry] = {}
        self._draining: dict[str, QueueEntry] = {}
        self._num_arrivals = 0

    @property
    def waiting(self) -> list[QueueEntry]:
        """Waiting entries, best first."""
        return sorted(self._waiting.values(), key=QueueEntry.rank)

    @property
    def running(self) -> list[QueueEntry]:
        return sorted(self._running.values(), key=QueueEntry.rank)

    @property
    def draining(self) -> list[QueueEntry]:
        return sorted(self._draining.values(), key=QueueEntry.rank)

    @property
    def num_slots_used(self) -> int:
        return len(self._running) + len(self._draining)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._waiting or job_id in self._running or job_id in self._draining

    def is_waiting(self, job_id: str) -> bool:
        return job_id in self._waiting

    def is_running(self, job_id: str) -> bool:
        return job_id in self._running

    def add(self, job_id: str, priority: float) -> None:
        """A new job joins the waiting queue."""
        if job_id in self:
            raise ValueError(f"job {job_id!r} is already queued")
        self._waiting[job_id] = QueueEntry(job_id, priority, self._num_arrivals)
        self._num_arrivals += 1

    def set_priority(self, job_id: str, priority: float) -> None:
        """Change a job's priority wherever it is (``schedule`` acts on the change)."""
        for table in (self._waiting, self._running, self._draining):
            if job_id in table:
                table[job_id] = replace(table[job_id], priority=priority)
                return
        raise KeyError(job_id)

    def preempt(self, job_id: str) -> bool:
        """Explicitly preempt a running job (it starts draining). False if it is not running."""
        entry = self._running.pop(job_id, None)
        if entry is None:
            return False
        self._draining[job_id] = entry
        return True

    def drained(self, job_id: str) -> None:
        """A draining job's segment ended: it waits again, with its original arrival."""
        self._waiting[job_id] = self._draining.pop(job_id)

    def remove(self, job_id: str) -> None:
        """Forget a finished, aborted or cancelled job (no-op if unknown)."""
        for table in (self._waiting, self._running, self._draining):
            table.pop(job_id, None)

    def schedule(self) -> list[Decision]:
        """Admit into free slots, then preempt for waiting jobs that beat the lowest running one."""
        num_free = max(0, self.max_running - self.num_slots_used)
        # The policy walks the waiting jobs best first and stops at the first that neither fits
        # nor evicts; each one before it takes a free slot or evicts a running job. So only the
        # best num_free + len(draining) + len(running) + 1 can matter: skip sorting the rest.
        num_relevant = num_free + len(self._draining) + len(self._running) + 1
        ordered = heapq.nsmallest(num_relevant, self._waiting.values(), key=QueueEntry.rank)
        # The waiting jobs right after those that fit get the slots being drained already.
        reserved = {entry.job_id for entry in ordered[num_free : num_free + len(self._draining)]}
        candidates = [entry for entry in ordered if entry.job_id not in reserved]
        decision = decide_preemptions(
            [entry.ranked() for entry in self._running.values()],
            [entry.ranked() for entry in candidates],
            float(num_free),
            self.preemption,
        )
        replacements = {preemption.replacement_id for preemption in decision.preemptions}
        decisions: list[Decision] = []
        for job_id in decision.admitted:
            if job_id not in replacements:  # a replacement waits for its victim's slot
                self._running[job_id] = self._waiting.pop(job_id)
                decisions.append(AdmitJob(job_id))
        for preemption in decision.preemptions:
            self._draining[preemption.victim_id] = self._running.pop(preemption.victim_id)
            decisions.append(PreemptJob(preemption.victim_id))
        return decisions
