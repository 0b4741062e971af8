"""The simulated workers' weight loads and the rollout's staleness bound.

A ``LoadWeights`` command (the weights decider sends one per worker when a version is
published) makes a worker hold the generations submitted to it from then on, as a live worker
does at its safe point (``between_steps``): the ones already in its engine finish on the old
weights (the drain), then the worker pauses ``load_s`` to swap, drops its whole prefix cache
(KV computed under the old weights is stale: each trajectory's next step re-prefills its
context, which the batching model counts as recomputed), records ``weights.loaded`` and submits
the held generations on the new version. A command for a version not above the one the worker
serves or is loading is ignored.

The bound: a generation that would run on version ``c`` for a trajectory whose oldest tokens
came from version ``o < c - max_staleness`` is refused and the trajectory fails as stale (what a
live worker does: ``heddle.workers.agent.caps.staleness_error``).

A migration's KV is imported only where it is valid (``accepts_kv``): a target serving other
weights, or about to swap, drops it and the step re-prefills.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from heddle.events import Event, LoadWeights, TrajectoryPhase, WeightsLoaded
from heddle.ids import derive_id
from heddle.sim.sim_worker import SimWorker
from heddle.sim.timers import Timer, TimerKind
from heddle.sim.trajectories import SimTrajectory

_SUBMITTABLE = (TrajectoryPhase.PENDING, TrajectoryPhase.READY)


@dataclass(frozen=True, slots=True)
class WeightPlan:
    """What a rollout starts with and what lands during it (times relative to its start)."""

    versions: dict[str, int] = field(default_factory=dict)
    """Per worker id, the version it serves at time 0 (absent: 0)."""
    loading: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Per worker id, a load in progress at time 0: (version, when it ends, >= 0)."""
    publications: tuple[tuple[float, int], ...] = ()
    """(time, version) of each ``WeightsPublished`` during the rollout."""
    max_staleness: int | None = None


@dataclass(slots=True)
class WorkerWeights:
    """One worker's weights: what it serves, what it is switching to, and what loads cost."""

    version: int = 0
    pending: LoadWeights | None = None
    """Commanded: the worker holds new generations until its engine drains."""
    pending_since: float = 0.0
    loading_version: int | None = None
    loading_since: float = 0.0
    """When the load in progress was commanded (0 for one carried into the rollout)."""
    ready_at: float = 0.0
    """When the load in progress ends."""
    held: dict[str, SimTrajectory] = field(default_factory=dict)
    num_loads: int = 0
    load_s: float = 0.0
    """Seconds paused swapping weights, over its loads."""
    drain_s: float = 0.0
    """Seconds from each command to its swap (new generations held, old ones finishing)."""
    num_invalidated_tokens: int = 0

    @property
    def is_holding(self) -> bool:
        return self.pending is not None or self.loading_version is not None


class WeightLoads:
    """The weights state of every simulated worker (owned by the simulated data plane)."""

    def __init__(
        self,
        workers: dict[str, SimWorker],
        load_s_for_tp: Callable[[int], float],
        timer: Timer,
        plan: WeightPlan | None,
    ) -> None:
        plan = plan or WeightPlan()
        self.workers = {
            worker_id: WorkerWeights(plan.versions.get(worker_id, 0)) for worker_id in workers
        }
        self.max_staleness = plan.max_staleness
        self.num_stale = 0
        """Generations refused for the bound (their trajectories failed as stale)."""
        self._engines = workers
        self._load_s_for_tp = load_s_for_tp
        self._timer = timer
        for worker_id, (version, ready_at) in plan.loading.items():
            state = self.workers[worker_id]
            state.loading_version, state.ready_at = version, ready_at
            timer.at(ready_at, TimerKind.WEIGHTS, worker_id)

    def command(self, command: LoadWeights, now: float) -> list[Event]:
        """Take a ``LoadWeights``; it causes no event at once."""
        state = self.workers.get(command.worker_id)
        if state is None:
            return []
        newest = max(state.version, state.loading_version or 0, _version(state.pending))
        if command.weight_version <= newest:
            return []
        if state.pending is None:
            state.pending_since = now
        state.pending = command
        self.start_if_drained(command.worker_id, now)
        return []

    def start_if_drained(self, worker_id: str, now: float) -> None:
        """Begin a commanded swap if the worker's engine has nothing in flight."""
        state = self.workers.get(worker_id)
        if state is None or state.pending is None or state.loading_version is not None:
            return
        if self._engines[worker_id].model.next_event_time() is not None:
            return
        load_s = self._load_s(worker_id)
        state.drain_s += now - state.pending_since
        state.load_s += load_s
        state.num_loads += 1
        state.loading_version, state.pending = state.pending.weight_version, None
        state.loading_since = state.pending_since
        state.ready_at = now + load_s
        self._timer.at(state.ready_at, TimerKind.WEIGHTS, worker_id)

    def hold(self, t: SimTrajectory) -> bool:
        """Whether ``t``'s next generation must wait for its worker's swap (then it is held)."""
        state = self.workers[t.worker_id]
        if not state.is_holding:
            return False
        t.is_waiting_for_weights = True
        state.held[t.traj_id] = t
        return True

    def swap(self, worker_id: str, now: float) -> tuple[list[Event], list[SimTrajectory]]:
        """The swap ended: the new version serves, the cache is dropped; returns its
        ``weights.loaded`` and the held trajectories that still wait there, in the order held
        (held again if a newer version was commanded during the swap)."""
        state = self.workers[worker_id]
        assert state.loading_version is not None
        state.version, state.loading_version = state.loading_version, None
        state.num_invalidated_tokens += self._engines[worker_id].model.invalidate_cache(now)
        held, state.held = list(state.held.values()), {}
        for t in held:
            t.is_waiting_for_weights = False
        held = [t for t in held if t.worker_id == worker_id and t.phase in _SUBMITTABLE]
        loaded = WeightsLoaded(
            event_id=derive_id("weights", state.version, worker_id, "loaded"),
            occurred_at=now,
            weight_version=state.version,
            worker_id=worker_id,
            load_s=now - state.loading_since,
        )
        self.start_if_drained(worker_id, now)  # a newer version commanded meanwhile: swap on
        return [loaded], held

    def settle(self, end_s: float) -> None:
        """At the rollout's end (every engine idle): a commanded swap starts now, or right
        after the swap in progress; ``loading_version`` and ``ready_at`` then say what each
        worker serves next and from when."""
        for worker_id, state in self.workers.items():
            if state.pending is None:
                continue
            start_s = end_s if state.loading_version is None else state.ready_at
            load_s = self._load_s(worker_id)
            state.drain_s += start_s - state.pending_since
            state.load_s += load_s
            state.num_loads += 1
            state.loading_since = state.pending_since
            state.loading_version, state.pending = state.pending.weight_version, None
            state.ready_at = start_s + load_s

    def accepts_kv(self, worker_id: str, kv_version: int) -> bool:
        """Whether KV computed under ``kv_version`` is valid at ``worker_id``: it serves that
        version and is not about to swap (a live engine refuses KV of other weights, the torch
        engine by its weights' fingerprint; the step then re-prefills)."""
        state = self.workers[worker_id]
        return state.version == kv_version and not state.is_holding

    def take_version(self, t: SimTrajectory) -> str | None:
        """Why ``t``'s next generation, on its worker's version, would break the bound (then it
        must fail); None: it runs on that version, now recorded in ``t.weight_versions``."""
        version = self.workers[t.worker_id].version
        oldest = t.weight_versions[0] if t.weight_versions else version
        if self.max_staleness is not None and version - oldest > self.max_staleness:
            self.num_stale += 1
            return f"stale: weights {oldest}..{version} exceed max_staleness {self.max_staleness}"
        if not t.weight_versions or t.weight_versions[-1] != version:
            t.weight_versions.append(version)
        return None

    def _load_s(self, worker_id: str) -> float:
        return self._load_s_for_tp(self._engines[worker_id].tp_degree)


def _version(command: LoadWeights | None) -> int:
    return command.weight_version if command is not None else 0
