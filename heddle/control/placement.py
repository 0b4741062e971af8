"""The placement decider (the router of the paper's s.5): initial placement, per-step routing,
migration requests and re-placement after worker failures.

Consumes:

- ``WorkerRegistered`` / ``WorkerFailed``: the live workers (id, TP degree).
- ``RolloutSubmitted``, ``TrajectorySubmitted``, ``Predicted`` with ``step = -1``: once a rollout's
  trajectories are all submitted (and, for a placer that needs them, all predicted) and workers
  are known, the placer's initial placement: ``TrajectoryPlaced`` + ``StartTrajectory`` each.
- ``Prioritized``: the priority stamped on the trajectory's next request.
- ``Generated`` / ``ToolReturned``: the trajectory's context length (for locality-aware routing).
- ``ToolCalled``: the trajectory leaves its worker's in-flight requests (the routers' load).
- ``ToolReturned``: routes the next step: ``ContinueTrajectory`` to the current worker, or, when
  the router picks another, ``TrajectoryPlaced`` + ``StartTrajectory(resume=True)`` there (the
  trajectory re-prefills on arrival).
- ``Predicted`` with ``step >= 0``: the placer may call for a migration: ``MigrationRequested``
  (once per target; the transfer decider schedules it).
- ``Migrated``: the trajectory now lives on the target. ``Completed`` / ``Failed``: forget it.
- ``WorkerFailed``: every trajectory of that worker goes to the live worker with the fewest
  in-flight requests: ``TrajectoryPlaced(reason="replacement")`` + ``StartTrajectory(resume)``.
- ``WorkerDrainRequested`` / ``WorkerUndrainRequested`` (an operator's, ``heddle.events.operator``):
  a draining worker gets no new trajectory (initial placement, admission, re-placement,
  migration targets, another worker's next step) but keeps routing the steps of those it holds;
  undrained, or registered again, it takes trajectories again.

With a KV admission gate (``heddle.control.admission_gate``; Heddle's bundles but
``heddle-no-admission``), the initial placement only *plans* each trajectory's worker: a
trajectory starts (``TrajectoryPlaced`` + ``StartTrajectory``) when a worker's projected KV has
room for it, held ones in the bundle's priority order, and the gate is asked again whenever
room may have appeared (a trajectory ended, moved or was re-predicted, a worker registered).
Migrations go only where the target has room.

State (owned by the decider): workers, per-worker in-flight requests, and per rollout its specs,
first predictions, placer and per-trajectory worker / priority / context; the gate's state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from heddle.control.admission_gate import AdmissionGate
from heddle.control.decider import Output
from heddle.control.placers import Assignment, PlacementRequest, Placer, WorkerInfo
from heddle.events import (
    Completed,
    ContinueTrajectory,
    Event,
    Failed,
    Generated,
    Migrated,
    MigrationRequested,
    Predicted,
    Prioritized,
    RolloutSubmitted,
    StartTrajectory,
    ToolCalled,
    ToolReturned,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
    WorkerDrainRequested,
    WorkerFailed,
    WorkerRegistered,
    WorkerUndrainRequested,
)
from heddle.events.trajectory import PlacementReason
from heddle.ids import derive_id


@dataclass(slots=True)
class _Trajectory:
    spec: TrajectorySpec
    worker_id: str = ""
    priority: float = 0.0
    context_tokens: int = 0
    output_tokens: int = 0
    """Tokens generated so far: with the predicted remaining, the predicted total length."""
    tool_s: float = 0.0
    """Tool seconds so far (the predicted total length counts tools too)."""
    step: int = 0
    """The step it runs next (or is running)."""
    is_generating: bool = False
    requested_target: str = ""
    """The target of the last MigrationRequested not yet Migrated ("" when none)."""
    rank: int = 0
    """Rank in the initial placement (presorted: 0 = predicted longest)."""


@dataclass(slots=True)
class _Rollout:
    num_trajectories: int = -1
    """-1 until RolloutSubmitted arrives."""
    trajectories: dict[str, _Trajectory] = field(default_factory=dict)
    first_predictions: dict[str, float] = field(default_factory=dict)
    first_tool_predictions: dict[str, float] = field(default_factory=dict)
    submitted_at: float = 0.0
    priorities: dict[str, float] = field(default_factory=dict)
    """Priorities seen before placement (the trajectory record takes over afterwards)."""
    placer: Placer | None = None


class PlacementDecider:
    name = "placement"
    handles: frozenset[type[Event]] = frozenset(
        {
            WorkerRegistered,
            WorkerFailed,
            WorkerDrainRequested,
            WorkerUndrainRequested,
            RolloutSubmitted,
            TrajectorySubmitted,
            Predicted,
            Prioritized,
            Generated,
            ToolCalled,
            ToolReturned,
            Migrated,
            Completed,
            Failed,
        }
    )

    def __init__(
        self, make_placer: Callable[[], Placer], *, gate: AdmissionGate | None = None
    ) -> None:
        """``make_placer`` builds one placer per rollout (fresh state, seeded randomness);
        ``gate``: start trajectories only as workers have KV room for them."""
        self._make_placer = make_placer
        self._gate = gate
        self._needs_predictions = make_placer().needs_predictions
        self._workers: dict[str, WorkerInfo] = {}
        self._in_flight: dict[str, int] = {}
        self._rollouts: dict[str, _Rollout] = {}
        self._draining: set[str] = set()
        """Workers an operator drains: they get no new trajectories."""
        self._ended: set[str] = set()
        """Rollouts whose trajectories all ended: their state is dropped, their events ignored
        (a redelivered submission must not place them again)."""

    def worker_of(self, rollout_id: str, traj_id: str) -> str:
        rollout = self._rollouts.get(rollout_id)
        trajectory = rollout.trajectories.get(traj_id) if rollout else None
        return trajectory.worker_id if trajectory else ""

    def decide(self, event: Event) -> list[Output]:
        if event.rollout_id in self._ended:
            return []
        match event:
            case WorkerRegistered():
                self._draining.discard(event.worker_id)
                if event.worker_id not in self._workers:
                    self._workers[event.worker_id] = WorkerInfo(event.worker_id, event.tp_degree)
                    self._in_flight[event.worker_id] = 0
                    if self._gate is not None:
                        self._gate.add_worker(event.worker_id, event.max_kv_tokens)
                return self._place_ready(event) + self._admit(event)
            case WorkerFailed():
                self._draining.discard(event.worker_id)
                return self._replace_worker(event)
            case WorkerDrainRequested():
                if event.worker_id in self._workers:
                    self._draining.add(event.worker_id)
            case WorkerUndrainRequested():
                if event.worker_id in self._draining:
                    self._draining.discard(event.worker_id)
                    return self._place_ready(event) + self._admit(event)
            case RolloutSubmitted():
                rollout = self._rollout(event.rollout_id)
                rollout.num_trajectories = event.num_trajectories
                rollout.submitted_at = event.occurred_at
                return self._place_ready(event)
            case TrajectorySubmitted():
                rollout = self._rollout(event.rollout_id)
                if event.traj_id not in rollout.trajectories:
                    prompt_tokens = len(event.spec.prompt_token_ids)
                    rollout.trajectories[event.traj_id] = _Trajectory(
                        event.spec, context_tokens=prompt_tokens
                    )
                return self._place_ready(event)
            case Predicted():
                return self._on_predicted(event)
            case Prioritized():
                self._on_prioritized(event)
            case Generated():
                trajectory = self._trajectory(event.rollout_id, event.traj_id)
                if trajectory is not None:
                    trajectory.context_tokens += len(event.output_token_ids)
                    trajectory.output_tokens += len(event.output_token_ids)
                    if self._gate is not None:
                        self._gate.generated(event)
                        self._gate.grew(
                            (event.rollout_id, event.traj_id), trajectory.context_tokens
                        )
            case ToolCalled():
                trajectory = self._trajectory(event.rollout_id, event.traj_id)
                if trajectory is not None:
                    self._stop_generating(trajectory)
            case ToolReturned():
                return self._route_next_step(event)
            case Migrated():
                self._on_migrated(event)
                return self._admit(event)
            case Completed() | Failed():
                self._on_finished(event.rollout_id, event.traj_id)
                return self._admit(event)
        return []

    def _candidates(self) -> dict[str, WorkerInfo]:
        """The workers that may take new trajectories (all but the draining)."""
        if not self._draining:
            return self._workers
        return {w: info for w, info in self._workers.items() if w not in self._draining}

    # ---- initial placement -----------------------------------------------------------------

    def _place_ready(self, event: Event) -> list[Output]:
        outputs: list[Output] = []
        for rollout_id, rollout in self._rollouts.items():
            if rollout.placer is None and self._is_ready(rollout):
                outputs += self._place(event, rollout_id, rollout)
        return outputs

    def _is_ready(self, rollout: _Rollout) -> bool:
        if not self._candidates() or len(rollout.trajectories) != rollout.num_trajectories:
            return False
        if not self._needs_predictions:
            return True
        return len(rollout.first_predictions) == rollout.num_trajectories

    def _place(self, event: Event, rollout_id: str, rollout: _Rollout) -> list[Output]:
        placer = self._make_placer()
        rollout.placer = placer
        ordered = sorted(rollout.trajectories.items(), key=lambda item: item[1].spec.index)
        requests = [
            PlacementRequest(
                tid,
                rollout.first_predictions.get(tid, 0.0),
                len(t.spec.prompt_token_ids),
                rollout.first_tool_predictions.get(tid, 0.0),
                group_id=t.spec.group_id,
            )
            for tid, t in ordered
        ]
        outputs: list[Output] = []
        for assignment in placer.place(requests, list(self._candidates().values())):
            trajectory = rollout.trajectories[assignment.traj_id]
            trajectory.priority = rollout.priorities.pop(assignment.traj_id, trajectory.priority)
            trajectory.rank = assignment.rank
            if self._gate is None:
                outputs += self._start(event, rollout_id, assignment, trajectory, "initial", True)
                continue
            key = (rollout_id, assignment.traj_id)
            remaining = rollout.first_predictions.get(assignment.traj_id, 0.0)
            self._gate.track(
                key,
                rollout.submitted_at,
                trajectory.spec.index,
                trajectory.context_tokens,
                remaining,
            )
            tool_s = rollout.first_tool_predictions.get(assignment.traj_id, 0.0)
            self._gate.hold(key, assignment.worker_id, tool_s)
        rollout.priorities.clear()
        return outputs + self._admit(event)

    def _admit(self, event: Event) -> list[Output]:
        """Start every held trajectory the gate lets in now, where it says."""
        if self._gate is None:
            return []
        outputs: list[Output] = []
        for (rollout_id, traj_id), worker_id in self._gate.admit(self._candidates()):
            rollout = self._rollouts[rollout_id]
            trajectory = rollout.trajectories[traj_id]
            if rollout.placer is not None:
                rollout.placer.on_moved(traj_id, worker_id)
            assignment = Assignment(traj_id, worker_id, trajectory.rank)
            outputs += self._start(event, rollout_id, assignment, trajectory, "initial", True)
        return outputs

    def _start(
        self,
        event: Event,
        rollout_id: str,
        assignment: Assignment,
        trajectory: _Trajectory,
        reason: PlacementReason,
        is_generating: bool,
    ) -> list[Output]:
        """Host the trajectory on the assignment's worker; ``is_generating``: whether it runs a
        step there now (False: it is in a tool call and waits for the result there)."""
        source = trajectory.worker_id
        self._stop_generating(trajectory)
        trajectory.worker_id = assignment.worker_id
        if is_generating:
            trajectory.is_generating = True
            self._in_flight[assignment.worker_id] += 1
        traj_id = assignment.traj_id
        step = trajectory.step
        placed = TrajectoryPlaced(
            event_id=derive_id(rollout_id, traj_id, step, reason, source or None, "placed"),
            rollout_id=rollout_id,
            occurred_at=event.occurred_at,
            traj_id=traj_id,
            worker_id=assignment.worker_id,
            reason=reason,
            group_rank=assignment.rank,
            tp_degree=self._workers[assignment.worker_id].tp_degree,
        )
        start = StartTrajectory(
            command_id=derive_id(rollout_id, traj_id, step, reason, source or None, "start"),
            rollout_id=rollout_id,
            issued_at=event.occurred_at,
            worker_id=assignment.worker_id,
            traj_id=traj_id,
            spec=trajectory.spec,
            priority=trajectory.priority,
            resume=reason != "initial",
            source_worker_id=source,
        )
        return [placed, start]

    # ---- steps, predictions, migrations ----------------------------------------------------

    def _route_next_step(self, event: ToolReturned) -> list[Output]:
        rollout = self._rollouts.get(event.rollout_id)
        trajectory = rollout.trajectories.get(event.traj_id) if rollout else None
        if rollout is None or trajectory is None or rollout.placer is None:
            return []
        step = event.step + 1
        if step <= trajectory.step:
            return []  # a duplicate: this step was routed already
        trajectory.step = step
        trajectory.context_tokens += len(event.output_token_ids)
        trajectory.tool_s += event.duration_s
        if self._gate is not None:
            key = (event.rollout_id, event.traj_id)
            self._gate.tool_returned(key, event.duration_s)
            self._gate.grew(key, trajectory.context_tokens)
        live_loads = self._in_flight
        target = rollout.placer.route(
            event.traj_id, trajectory.worker_id, trajectory.context_tokens, live_loads
        )
        if target in self._draining:
            target = trajectory.worker_id  # a draining worker takes no trajectory of another
        if target != trajectory.worker_id:
            assignment = Assignment(event.traj_id, target, 0)
            return self._start(event, event.rollout_id, assignment, trajectory, "migration", True)
        trajectory.is_generating = True
        self._in_flight[trajectory.worker_id] = self._in_flight.get(trajectory.worker_id, 0) + 1
        return [
            ContinueTrajectory(
                command_id=derive_id(event.rollout_id, event.traj_id, step, "continue"),
                rollout_id=event.rollout_id,
                issued_at=event.occurred_at,
                worker_id=trajectory.worker_id,
                traj_id=event.traj_id,
                step=step,
                tool_result=event,
                priority=trajectory.priority,
            )
        ]

    def _on_predicted(self, event: Predicted) -> list[Output]:
        rollout = self._rollout(event.rollout_id)
        if event.step < 0:
            if rollout.placer is None:
                rollout.first_predictions[event.traj_id] = event.predicted_remaining_tokens
                rollout.first_tool_predictions[event.traj_id] = event.predicted_remaining_tool_s
                return self._place_ready(event)
            return []
        trajectory = rollout.trajectories.get(event.traj_id)
        if trajectory is None or rollout.placer is None:
            return []
        if self._gate is not None:
            key = (event.rollout_id, event.traj_id)
            remaining = event.predicted_remaining_tokens
            self._gate.predicted(key, remaining, event.predicted_remaining_tool_s)
            return self._request_migration(event, rollout, trajectory) + self._admit(event)
        return self._request_migration(event, rollout, trajectory)

    def _request_migration(
        self, event: Predicted, rollout: _Rollout, trajectory: _Trajectory
    ) -> list[Output]:
        assert rollout.placer is not None
        # The presorted order is by trajectory length (paper s.5.3): what it generated plus what
        # it is predicted to generate, tools included as the placer counts them. Ranking by the
        # remaining length alone would send every nearly finished trajectory to the workers of
        # the short group.
        tool_s = trajectory.tool_s + event.predicted_remaining_tool_s
        predicted_total = (
            trajectory.output_tokens
            + event.predicted_remaining_tokens
            + rollout.placer.token_equivalents(tool_s)
        )
        request = rollout.placer.on_prediction(
            event.traj_id,
            predicted_total,
            remaining_tokens=event.predicted_remaining_tokens,
            context_tokens=trajectory.context_tokens,
        )
        if request is None or request.target_id in ("", trajectory.requested_target):
            return []
        if request.target_id not in self._workers or request.target_id in self._draining:
            return []
        key = (event.rollout_id, event.traj_id)
        if self._gate is not None and not self._gate.has_room(request.target_id, key):
            return []  # the target cannot hold it: moving would only make it thrash there
        trajectory.requested_target = request.target_id
        return [
            MigrationRequested(
                event_id=derive_id(event.rollout_id, event.traj_id, event.step, "migration"),
                rollout_id=event.rollout_id,
                occurred_at=event.occurred_at,
                traj_id=event.traj_id,
                source_worker_id=trajectory.worker_id,
                target_worker_id=request.target_id,
                predicted_remaining_tokens=request.predicted_remaining_tokens,
                new_rank=request.rank,
            )
        ]

    def _on_prioritized(self, event: Prioritized) -> None:
        rollout = self._rollout(event.rollout_id)
        trajectory = rollout.trajectories.get(event.traj_id)
        if trajectory is not None and rollout.placer is not None:
            trajectory.priority = event.priority
        else:
            rollout.priorities[event.traj_id] = event.priority

    def _on_migrated(self, event: Migrated) -> None:
        rollout = self._rollouts.get(event.rollout_id)
        trajectory = rollout.trajectories.get(event.traj_id) if rollout else None
        if rollout is None or trajectory is None:
            return
        if trajectory.is_generating:
            self._in_flight[trajectory.worker_id] -= 1
            self._in_flight[event.target_worker_id] = (
                self._in_flight.get(event.target_worker_id, 0) + 1
            )
        trajectory.worker_id = event.target_worker_id
        trajectory.requested_target = ""
        if rollout.placer is not None:
            rollout.placer.on_moved(event.traj_id, event.target_worker_id)
        if self._gate is not None:
            self._gate.moved((event.rollout_id, event.traj_id), event.target_worker_id)

    def _on_finished(self, rollout_id: str, traj_id: str) -> None:
        rollout = self._rollouts.get(rollout_id)
        trajectory = rollout.trajectories.pop(traj_id, None) if rollout else None
        if rollout is None or trajectory is None:
            return
        if self._gate is not None:
            self._gate.finished((rollout_id, traj_id))
        if trajectory.is_generating:
            self._stop_generating(trajectory)
        if rollout.placer is not None:
            rollout.placer.on_finished(traj_id)
            if not rollout.trajectories:
                del self._rollouts[rollout_id]
                self._ended.add(rollout_id)

    def _replace_worker(self, event: WorkerFailed) -> list[Output]:
        if self._workers.pop(event.worker_id, None) is None:
            return []
        self._in_flight.pop(event.worker_id, None)
        if self._gate is not None:
            self._gate.remove_worker(event.worker_id)
        outputs: list[Output] = []
        for rollout_id, rollout in self._rollouts.items():
            if rollout.placer is None:
                continue
            rollout.placer.on_worker_failed(event.worker_id)
            for traj_id, trajectory in rollout.trajectories.items():
                candidates = self._candidates() or self._workers
                if trajectory.worker_id != event.worker_id or not candidates:
                    continue
                target = min(candidates, key=lambda worker: self._in_flight[worker])
                was_generating = trajectory.is_generating
                trajectory.is_generating = False  # its old worker's count is gone
                assignment = Assignment(traj_id, target, 0)
                outputs += self._start(
                    event, rollout_id, assignment, trajectory, "replacement", was_generating
                )
                rollout.placer.on_moved(traj_id, target)
                if self._gate is not None:
                    self._gate.moved((rollout_id, traj_id), target)
        return outputs + self._admit(event)

    def snapshot(self) -> tuple[object, ...]:
        """The state, as a comparable value (replay tests): workers, in-flight counts, and per
        rollout its trajectories, first predictions and the placer's view of them."""
        rollouts = {
            rollout_id: (
                rollout.num_trajectories,
                dict(rollout.trajectories),
                dict(rollout.first_predictions),
                rollout.placer.snapshot() if rollout.placer is not None else None,
            )
            for rollout_id, rollout in self._rollouts.items()
        }
        gate = self._gate.snapshot() if self._gate is not None else None
        workers, draining = dict(self._workers), frozenset(self._draining)
        return workers, dict(self._in_flight), rollouts, frozenset(self._ended), gate, draining

    # ---- helpers -----------------------------------------------------------------------------

    def _rollout(self, rollout_id: str) -> _Rollout:
        rollout = self._rollouts.get(rollout_id)
        if rollout is None:
            rollout = self._rollouts[rollout_id] = _Rollout()
        return rollout

    def _trajectory(self, rollout_id: str, traj_id: str) -> _Trajectory | None:
        rollout = self._rollouts.get(rollout_id)
        return rollout.trajectories.get(traj_id) if rollout else None

    def _stop_generating(self, trajectory: _Trajectory) -> None:
        if trajectory.is_generating:
            trajectory.is_generating = False
            if trajectory.worker_id in self._in_flight:
                self._in_flight[trajectory.worker_id] -= 1
