"""KV admission: which placed trajectories may start now, and on which worker (the algorithm of
``KvAdmissionGate``).

Why. An agentic trajectory holds its KV through its tool calls (a returning step that finds its
prefix evicted re-prefills its whole context, which costs several times the decode of a turn),
and its context grows over its life to tens of thousands of tokens. Started all at once, a
rollout's trajectories ask for several times the KV of the cluster: the engines thrash, evicting
and re-prefilling prefixes, and every trajectory waits in an engine queue behind the others. So
Heddle starts a trajectory only when its worker can hold it to the end: the predicted peak KV of
the trajectories admitted to a worker (context so far plus predicted remaining output and the
observations that come with it) may sum to ``overcommit`` times the worker's KV capacity (peaks
come at different times, so a little over 1). The others wait in the control plane, longest
predicted first (their PPS priority), and start as trajectories finish; once started, a
trajectory keeps its place. This is list scheduling (LPT) with KV as the machine capacity.

Where. A held trajectory starts on its planned worker (the presorted placement's) if that worker
has room, else, when ``late_binding``, on the worker with the most room relative to its capacity
(a worker that drained early takes work the plan gave another). Strict order: a head that fits
nowhere blocks the rest (no overtaking by smaller ones), except that an idle worker always takes
the head. Workers that report no capacity (``max_kv_tokens = 0``) always have room.

Shared prompts. Where the engine holds a prompt once for the trajectories that share it (a GRPO
group's prompt in SGLang's radix cache: ``heddle.policy.engine_models``, ``prompt_sharing``), a
footprint names the part of its context that is such a prompt (``shared_tokens`` under
``shared_key``): a worker counts it once for all its residents of that key, held until the last of
them leaves, as ``heddle.policy.bound_facts`` counts a group's prompt once per worker. Counted
once per sample, a 16-sample group on a long prompt was held back for most of its run while the
engine had room for all of it (docs/benchmarks.md, "Admission counts a shared prompt once").

State keys are ``(rollout id, trajectory id)``; everything is deterministic (ties by hold order).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from heddle.control.placement.admission import Admitted, Key
from heddle.control.placement.kv_worker import Footprint, WorkerBudget


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    overcommit: float = 1.2
    """Admitted trajectories' projected KV (or, without ``projection``, their predicted peaks)
    may reach this times a worker's KV capacity: predictions err, and an engine that runs a
    little over its cache evicts a little (the default's measurements: docs/benchmarks.md,
    "KV admission's defaults")."""
    late_binding: bool = True
    """A held trajectory may start on another worker than its planned one."""
    growth_share: float = 1.0
    """How much of its predicted remaining growth a trajectory's footprint counts: 1 is its
    peak, 0 its context now."""
    duty_cycle: bool = True
    """A trajectory whose tool calls average over ``retention_s`` counts its KV only for the
    share of its remaining time it generates (predicted decode seconds over decode plus tool
    seconds): through a test run of minutes its KV may be evicted and re-prefilled on return
    for far less than holding a whole trajectory back costs, while one with short tool calls
    (a search, a shell command) would thrash if it lost its cache, and counts whole."""
    retention_s: float = 10.0
    """Tool calls longer than this on average are not worth holding KV through: re-prefilling
    the context costs far less than the gap (docs/benchmarks.md, "KV admission's defaults")."""
    projection: bool = True
    """Check a worker's KV over time instead of its summed peaks: each trajectory's footprint
    grows towards its peak over its predicted remaining time and frees at its end, and a
    trajectory is admitted if the residents' projected sum stays within the budget at every
    departure. Peaks come at different times, so this admits more than the summed peaks do
    when trajectories end apart, and as much when they end together."""

    def __post_init__(self) -> None:
        if not self.overcommit > 0:
            raise ValueError(f"overcommit must be > 0, got {self.overcommit}")
        if not self.retention_s >= 0:
            raise ValueError(f"retention_s must be >= 0, got {self.retention_s}")
        if not 0.0 <= self.growth_share <= 1.0:
            raise ValueError(f"growth_share must be in [0, 1], got {self.growth_share}")


@dataclass(slots=True)
class _Held:
    priority: float
    footprint: Footprint
    planned_worker: str
    sequence: int


class KvAdmission:
    """The held queue and each worker's admitted peaks (see the module docstring)."""

    def __init__(self, config: AdmissionConfig | None = None) -> None:
        self.config = config or AdmissionConfig()
        self._workers: dict[str, WorkerBudget] = {}
        self._held: dict[Key, _Held] = {}
        self._heap: list[tuple[float, int, Key]] = []
        self._admitted: dict[Key, tuple[str, Footprint]] = {}
        """key -> (worker, footprint)."""
        self._sequence = 0

    # ---- workers -------------------------------------------------------------------------

    def add_worker(self, worker_id: str, max_kv_tokens: int) -> None:
        """A worker registered; one known already (relaunched at another TP degree) keeps its
        residents under its new capacity."""
        budget = self.config.overcommit * max(0, max_kv_tokens)
        worker = self._workers.get(worker_id)
        if worker is None:
            self._workers[worker_id] = WorkerBudget(budget, self.config.projection)
        elif worker.budget != budget:
            worker.budget = budget
            worker.fitting.clear()

    def remove_worker(self, worker_id: str) -> None:
        """A failed worker: its residents are moved (``moved``) or released by the caller."""
        self._workers.pop(worker_id, None)

    def has_room(self, worker_id: str, key: Key) -> bool:
        """Whether an admitted trajectory could move to ``worker_id`` within its budget."""
        worker = self._workers.get(worker_id)
        admitted = self._admitted.get(key)
        if worker is None or admitted is None:
            return worker is not None
        return admitted[0] == worker_id or worker.fits(admitted[1])

    # ---- trajectories --------------------------------------------------------------------

    def hold(self, key: Key, priority: float, footprint: Footprint, planned_worker: str) -> None:
        if key in self._held or key in self._admitted:
            return
        self._sequence += 1
        self._held[key] = _Held(priority, footprint, planned_worker, self._sequence)
        heapq.heappush(self._heap, (-priority, self._sequence, key))

    def is_held(self, key: Key) -> bool:
        return key in self._held

    def reprioritize(self, key: Key, priority: float) -> None:
        held = self._held.get(key)
        if held is not None and held.priority != priority:
            held.priority = priority
            heapq.heappush(self._heap, (-priority, held.sequence, key))

    def update(self, key: Key, footprint: Footprint) -> None:
        """A new estimate (a prediction, or a grown context)."""
        held = self._held.get(key)
        if held is not None:
            held.footprint = footprint
            return
        admitted = self._admitted.get(key)
        if admitted is not None:
            worker = self._workers.get(admitted[0])
            if worker is not None:
                worker.put(key, footprint)
            self._admitted[key] = (admitted[0], footprint)

    def moved(self, key: Key, worker_id: str) -> None:
        """An admitted trajectory now lives on ``worker_id`` (migration or re-placement)."""
        admitted = self._admitted.get(key)
        if admitted is None or admitted[0] == worker_id:
            return
        self._leave(key, admitted)
        self._join(key, worker_id, admitted[1])

    def release(self, key: Key) -> None:
        """The trajectory finished (or failed): forget it, held or admitted."""
        self._held.pop(key, None)
        admitted = self._admitted.pop(key, None)
        if admitted is not None:
            self._leave(key, admitted)

    def admit(self, live_workers: Iterable[str]) -> list[Admitted]:
        """Start what fits, in priority order: ``(key, worker)`` pairs, each now admitted."""
        live = [w for w in live_workers if w in self._workers]
        started: list[Admitted] = []
        while live and (top := self._peek()) is not None:
            key, held = top
            worker_id = self._choose(held, live)
            if worker_id is None:
                break
            heapq.heappop(self._heap)
            del self._held[key]
            self._join(key, worker_id, held.footprint)
            started.append(Admitted(key, worker_id))
        return started

    def snapshot(self) -> tuple[object, ...]:
        """The state, as a comparable value (replay tests)."""
        workers = {
            w: (v.budget, round(v.load, 6), frozenset(v.residents.items()))
            for w, v in self._workers.items()
        }
        held = {k: (v.priority, v.footprint, v.planned_worker) for k, v in self._held.items()}
        return workers, held, dict(self._admitted)

    # ---- internals -----------------------------------------------------------------------

    def _peek(self) -> tuple[Key, _Held] | None:
        while self._heap:
            neg_priority, sequence, key = self._heap[0]
            held = self._held.get(key)
            if held is not None and held.sequence == sequence and -neg_priority == held.priority:
                return key, held
            heapq.heappop(self._heap)
        return None

    def _choose(self, held: _Held, live: list[str]) -> str | None:
        planned = self._workers.get(held.planned_worker)
        if planned is not None and held.planned_worker in live and planned.fits(held.footprint):
            return held.planned_worker
        if not self.config.late_binding and held.planned_worker in live:
            return None
        fitting = [w for w in live if self._workers[w].fits(held.footprint)]
        if not fitting:
            return None
        return max(fitting, key=lambda w: self._free_fraction(self._workers[w]))

    @staticmethod
    def _free_fraction(worker: WorkerBudget) -> float:
        if not worker.residents:
            return float("inf")
        return worker.room() / worker.budget if worker.budget > 0 else float("inf")

    def _join(self, key: Key, worker_id: str, footprint: Footprint) -> None:
        self._admitted[key] = (worker_id, footprint)
        worker = self._workers.get(worker_id)
        if worker is not None:
            worker.put(key, footprint)

    def _leave(self, key: Key, admitted: tuple[str, Footprint]) -> None:
        worker = self._workers.get(admitted[0])
        if worker is not None:
            worker.remove(key)
