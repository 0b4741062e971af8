"""The weights decider: tells every live worker to load the latest published weight version.

Consumes ``WeightsPublished`` (a new latest version, when above the current one), the workers'
lifecycle (``WorkerRegistered``: a new incarnation starts on the weights it was launched with;
``WorkerFailed``, ``WorkerRetired``: gone) and ``WeightsLoaded`` (what a worker now serves). It
emits one ``LoadWeights`` per live worker for each new version, and one to a worker that
registers (or re-registers) while a version is published, so a restarted worker catches up.
Command ids derive from the version and the worker's incarnation: a re-processed event re-sends
nothing new.
Pure: no clock but the events' ``occurred_at``.
"""

from __future__ import annotations

from dataclasses import dataclass

from heddle.control.decider import Output
from heddle.events import (
    Event,
    LoadWeights,
    WeightsLoaded,
    WeightsPublished,
    WorkerFailed,
    WorkerRegistered,
    WorkerRetired,
)
from heddle.ids import derive_id


@dataclass(slots=True)
class _Worker:
    incarnation: str
    loaded_version: int = 0


class WeightsDecider:
    """State: the latest published version and, per live worker, the version it loaded."""

    name = "weights"
    slot = "weights"
    handles: frozenset[type[Event]] = frozenset(
        {WeightsPublished, WeightsLoaded, WorkerRegistered, WorkerFailed, WorkerRetired}
    )

    def __init__(self) -> None:
        self.latest: WeightsPublished | None = None
        self._workers: dict[str, _Worker] = {}

    def decide(self, event: Event) -> list[Output]:
        match event:
            case WeightsPublished():
                if self.latest is not None and event.weight_version <= self.latest.weight_version:
                    return []
                self.latest = event
                return [self._load(worker_id, event) for worker_id in sorted(self._workers)]
            case WorkerRegistered():
                self._workers[event.worker_id] = _Worker(event.incarnation)
                if self.latest is None:
                    return []
                return [self._load(event.worker_id, self.latest)]
            case WorkerFailed() | WorkerRetired():
                self._workers.pop(event.worker_id, None)
            case WeightsLoaded():
                worker = self._workers.get(event.worker_id)
                if worker is not None and event.incarnation in ("", worker.incarnation):
                    worker.loaded_version = max(worker.loaded_version, event.weight_version)
        return []

    def _load(self, worker_id: str, published: WeightsPublished) -> LoadWeights:
        incarnation = self._workers[worker_id].incarnation
        return LoadWeights(
            command_id=derive_id("weights", published.weight_version, worker_id, incarnation),
            issued_at=published.occurred_at,
            worker_id=worker_id,
            weight_version=published.weight_version,
            source=published.source,
            load_policy=published.load_policy,
        )

    def loaded_versions(self) -> dict[str, int]:
        """Per live worker, the latest version it reported loaded (0: none)."""
        return {worker_id: w.loaded_version for worker_id, w in sorted(self._workers.items())}

    def snapshot(self) -> tuple[int, dict[str, int]]:
        """The state, as a comparable value (replay tests)."""
        latest = self.latest.weight_version if self.latest is not None else 0
        return latest, self.loaded_versions()
