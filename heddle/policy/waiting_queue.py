"""A waiting queue ordered by (priority desc, arrival, id) that supports re-prioritisation.

A binary heap with lazy deletion: re-prioritising or removing a request marks its old heap entry
stale instead of searching for it, so every operation is ``O(log n)`` amortised. Stale entries are
skipped when they surface and the heap is rebuilt once they outnumber the live ones, so memory
stays ``O(live)``. Engines, worker agents and the simulator keep one per worker.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class _Entry:
    neg_priority: float
    arrival_s: float
    request_id: str
    version: int


@dataclass(frozen=True, slots=True)
class QueuedRequest:
    request_id: str
    priority: float
    arrival_s: float


class WaitingQueue:
    """Requests waiting for a batch slot; ``pop`` returns the highest priority, then the earliest
    arrival, then the smallest id. ``ValueError`` for a duplicate push, an unknown id or a NaN
    priority."""

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._live: dict[str, _Entry] = {}
        self._next_version = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._live

    def __iter__(self) -> Iterator[QueuedRequest]:
        """The requests in pop order (a snapshot; ``O(n log n)``)."""
        for entry in sorted(self._live.values()):
            yield _request(entry)

    def push(self, request_id: str, priority: float, arrival_s: float) -> None:
        if request_id in self._live:
            raise ValueError(f"request {request_id!r} is already queued")
        self._insert(request_id, priority, arrival_s)

    def reprioritize(self, request_id: str, priority: float) -> None:
        """Give a queued request a new priority; it keeps its arrival time."""
        entry = self._entry(request_id)
        self._insert(request_id, priority, entry.arrival_s)

    def remove(self, request_id: str) -> QueuedRequest:
        entry = self._entry(request_id)
        del self._live[request_id]
        self._compact_if_sparse()
        return _request(entry)

    def peek(self) -> QueuedRequest | None:
        self._drop_stale_top()
        return _request(self._heap[0]) if self._heap else None

    def pop(self) -> QueuedRequest:
        self._drop_stale_top()
        if not self._heap:
            raise IndexError("pop from an empty waiting queue")
        entry = heapq.heappop(self._heap)
        del self._live[entry.request_id]
        return _request(entry)

    def priority_of(self, request_id: str) -> float:
        return -self._entry(request_id).neg_priority

    def _entry(self, request_id: str) -> _Entry:
        entry = self._live.get(request_id)
        if entry is None:
            raise ValueError(f"request {request_id!r} is not queued")
        return entry

    def _insert(self, request_id: str, priority: float, arrival_s: float) -> None:
        if priority != priority or arrival_s != arrival_s:
            raise ValueError(f"request {request_id!r}: priority and arrival must not be NaN")
        entry = _Entry(-priority, arrival_s, request_id, self._next_version)
        self._next_version += 1
        self._live[request_id] = entry
        heapq.heappush(self._heap, entry)
        self._compact_if_sparse()

    def _is_stale(self, entry: _Entry) -> bool:
        return self._live.get(entry.request_id) is not entry

    def _drop_stale_top(self) -> None:
        while self._heap and self._is_stale(self._heap[0]):
            heapq.heappop(self._heap)

    def _compact_if_sparse(self) -> None:
        if len(self._heap) > 2 * len(self._live) + 16:
            self._heap = list(self._live.values())
            heapq.heapify(self._heap)


def _request(entry: _Entry) -> QueuedRequest:
    return QueuedRequest(entry.request_id, -entry.neg_priority, entry.arrival_s)
