"""Each worker's trajectories by predicted remaining output tokens, kept sorted: the batch a
worker runs and its longest member, which re-balancing moves weigh
(``heddle.policy.placement.rebalance``).
"""

from __future__ import annotations

from bisect import bisect_left, insort


class RemainingByWorker:
    """Per trajectory its worker and last predicted remaining tokens; per worker those values,
    sorted (the longest last)."""

    def __init__(self) -> None:
        self._remaining: dict[str, float] = {}
        self._worker_of: dict[str, str] = {}
        self._on: dict[str, list[float]] = {}

    def get(self, traj_id: str) -> float | None:
        return self._remaining.get(traj_id)

    def num_on(self, worker_id: str) -> int:
        return len(self._on.get(worker_id, ()))

    def longest_on(self, worker_id: str) -> float:
        """The longest remaining on ``worker_id`` (0 when it holds none)."""
        values = self._on.get(worker_id)
        return values[-1] if values else 0.0

    def set(self, traj_id: str, worker_id: str, remaining: float | None) -> None:
        """Move ``traj_id``'s entry to ``worker_id`` with ``remaining`` (None: drop it)."""
        self.drop(traj_id)
        if remaining is None:
            return
        self._remaining[traj_id] = remaining
        self._worker_of[traj_id] = worker_id
        insort(self._on.setdefault(worker_id, []), remaining)

    def drop(self, traj_id: str) -> None:
        old = self._remaining.pop(traj_id, None)
        old_worker = self._worker_of.pop(traj_id, None)
        if old is not None and old_worker is not None:
            values = self._on[old_worker]
            del values[bisect_left(values, old)]
