"""What placement knows of weight versions: the latest published, the version each worker
serves, and so which workers must still swap and whose KV a swap makes stale.

A worker commanded to a newer version (``heddle.control.weights``) holds new generations, lets
its engine drain, pauses to load, and drops its whole prefix cache: KV computed under the old
weights is worthless under the new ones. So, once version ``v`` is published:

- a worker serving a version below ``v`` (it registered, or loaded an older one) is *swapping*:
  its next generation waits for the load (``pause_s``, the cost model's estimate; the drain
  of its running generations is not estimated, their remaining lengths being unknown here);
- a trajectory whose last generation ran on a version below ``v`` holds *stale* KV: wherever
  its next step runs, it re-prefills its context, so a move costs it no re-prefill it would
  not pay anyway, and no KV is worth transferring.

Before any publication nothing swaps and nothing is stale. Pure: events only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from heddle.control.placement.placer import WorkerInfo
from heddle.events import WeightsLoaded, WeightsPublished

_NO_PAUSES: Mapping[str, float] = {}


class WeightSwaps:
    """The latest published version and, per live worker, the version it serves."""

    def __init__(self, load_s_for_tp: Callable[[int], float] | None = None) -> None:
        """``load_s_for_tp``: seconds a worker of each TP degree pauses to load a version
        (None: the pause is not counted)."""
        self.latest = 0
        self._serving: dict[str, int] = {}
        self._swapping: set[str] = set()
        """The workers serving a version below ``latest`` (kept as events come)."""
        self._load_s_for_tp = load_s_for_tp

    def published(self, event: WeightsPublished) -> None:
        """A publication (one not above the latest version changes nothing)."""
        if event.weight_version <= self.latest:
            return
        self.latest = event.weight_version
        self._swapping = {w for w, version in self._serving.items() if version < self.latest}

    def loaded(self, event: WeightsLoaded) -> None:
        serving = self._serving.get(event.worker_id)
        if serving is None or event.weight_version <= serving:
            return
        self._serving[event.worker_id] = event.weight_version
        if event.weight_version >= self.latest:
            self._swapping.discard(event.worker_id)

    def registered(self, worker_id: str) -> None:
        """A worker (re)starts on the weights it was launched with (version 0)."""
        self._serving[worker_id] = 0
        if self.latest:
            self._swapping.add(worker_id)

    def forget(self, worker_id: str) -> None:
        self._serving.pop(worker_id, None)
        self._swapping.discard(worker_id)

    def is_swapping(self, worker_id: str) -> bool:
        """Whether the worker must load the latest version before its next generation."""
        return worker_id in self._swapping

    def is_stale(self, kv_version: int) -> bool:
        """Whether KV computed under ``kv_version`` is dropped before its next use."""
        return kv_version < self.latest

    def pauses(self, workers: Mapping[str, WorkerInfo]) -> Mapping[str, float]:
        """Per swapping worker of ``workers``, its load pause in seconds; empty when nothing
        swaps or the pause is not counted."""
        if self._load_s_for_tp is None or not self._swapping:
            return _NO_PAUSES
        load_s = self._load_s_for_tp
        return {w: load_s(workers[w].tp_degree) for w in self._swapping if w in workers}

    def snapshot(self) -> tuple[int, dict[str, int], frozenset[str]]:
        """The state, as a comparable value (replay tests)."""
        return self.latest, dict(sorted(self._serving.items())), frozenset(self._swapping)
