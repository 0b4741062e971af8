"""Operator drain (``WorkerDrainRequested`` / ``WorkerUndrainRequested``, from
``heddle.events.operator``): a draining worker gets no new trajectory (initial placement,
admission, re-placement, migration targets, another worker's next step) but keeps routing the
steps of those it holds; undrained, registered again or failed, it is no longer draining."""

from __future__ import annotations

from heddle.control.placement.state import PlacementState
from heddle.events import WorkerDrainRequested, WorkerUndrainRequested


class OperatorDrain:
    def __init__(self, state: PlacementState) -> None:
        self._state = state

    def drain(self, event: WorkerDrainRequested) -> None:
        """Drain a known worker (an unknown one is ignored)."""
        if event.worker_id in self._state.workers:
            self._state.draining.add(event.worker_id)

    def undrain(self, event: WorkerUndrainRequested) -> bool:
        """Whether the worker was draining (it may take trajectories again now)."""
        if event.worker_id not in self._state.draining:
            return False
        self._state.draining.discard(event.worker_id)
        return True

    def forget(self, worker_id: str) -> None:
        """The worker registered again or failed: whatever it was, it does not drain."""
        self._state.draining.discard(worker_id)
