"""The control plane's view for operators, and the decider that carries out their requests.

``OperationsView`` folds the lifecycle events (rollouts, trajectories, placements, workers) into
what the operations service answers (``status``, ``rollout.info``, ``trajectory.info``) and checks
steering requests against (``check``: ``RequestRefused`` for unknown ids and finished
targets). It is also a decider: it answers the operator events it validated
(``heddle.events.operator``) with what they call for, sent to whichever worker holds the
trajectory when the event arrives:

- ``TrajectoryAbortRequested``: ``Abort`` to its worker; a trajectory not placed yet (held by
  the admission gate) ends at once with a non-retryable ``Failed``;
- ``RolloutCancelRequested``: ``RolloutCancelled`` (the worker fold aborts its trajectories,
  the slots stop commanding it);
- ``WorkerDrainRequested`` / ``WorkerUndrainRequested``: ``Drain`` / ``Undrain`` to the worker
  (the placement decider stops or resumes placing there).

``TrajectoryReprioritizeRequested`` is the priority decider's (it owns priorities). A request
whose target finished between its validation and its event's arrival is a no-op: nothing is
emitted for a finished trajectory or rollout. Pure: ``now`` is the event's ``occurred_at``.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from heddle.control.decider import Output
from heddle.control.ops_outputs import (
    abort_command,
    drain_command,
    rollout_cancelled,
    undrain_command,
    unplaced_abort_failed,
)
from heddle.control.ops_requests import (
    AbortRequest,
    CancelRequest,
    DrainRequest,
    ReprioritizeRequest,
    SteeringRequest,
    UndrainRequest,
)
from heddle.control.ops_requests import RequestRefused as RequestRefused
from heddle.control.ops_views import (
    RolloutState,
    RolloutView,
    TrajectoryState,
    TrajectoryView,
    WorkerState,
    WorkerView,
)
from heddle.control.submissions import DeploymentLimits
from heddle.events import (
    Completed,
    Event,
    Failed,
    Migrated,
    Prioritized,
    RolloutCancelled,
    RolloutCancelRequested,
    RolloutFinished,
    RolloutSubmitted,
    TrajectoryAbortRequested,
    TrajectoryPlaced,
    TrajectoryReprioritizeRequested,
    TrajectorySubmitted,
    WorkerDrained,
    WorkerDrainRequested,
    WorkerFailed,
    WorkerRegistered,
    WorkerRetired,
    WorkerUndrainRequested,
)
from heddle.events.rollout import DEFAULT_TRAINER

OPERATIONS_SLOT = "operations"
MAX_ENDED_ROLLOUTS = 256
"""Ended rollouts the view remembers (the oldest are forgotten: the ledger keeps them)."""


class OperationsView:
    """State: rollouts, their trajectories and the workers, as the stream tells them."""

    slot = OPERATIONS_SLOT
    handles: frozenset[type[Event]] = frozenset(
        {
            RolloutSubmitted, RolloutFinished, RolloutCancelled, TrajectorySubmitted,
            TrajectoryPlaced, Migrated, Prioritized, Completed, Failed, WorkerRegistered,
            WorkerDrained, WorkerFailed, WorkerRetired, TrajectoryReprioritizeRequested,
            TrajectoryAbortRequested, RolloutCancelRequested, WorkerDrainRequested,
            WorkerUndrainRequested,
        }
    )  # fmt: skip

    def __init__(self) -> None:
        self.rollouts: OrderedDict[str, RolloutView] = OrderedDict()
        self.workers: dict[str, WorkerView] = {}
        self._ended: list[str] = []

    # ---- queries ------------------------------------------------------------------------------

    def rollout(self, rollout_id: str) -> RolloutView:
        rollout = self.rollouts.get(rollout_id)
        if rollout is None:
            raise RequestRefused(404, f"unknown rollout {rollout_id!r}")
        return rollout

    def trajectory(self, rollout_id: str, traj_id: str) -> TrajectoryView:
        trajectory = self.rollout(rollout_id).trajectories.get(traj_id)
        if trajectory is None:
            raise RequestRefused(404, f"unknown trajectory {traj_id!r} in rollout {rollout_id!r}")
        return trajectory

    def worker(self, worker_id: str) -> WorkerView:
        worker = self.workers.get(worker_id)
        if worker is None:
            raise RequestRefused(404, f"unknown worker {worker_id!r}")
        return worker

    def limits(self, max_event_bytes: int) -> DeploymentLimits:
        """What a submission must fit: the live workers' time scales and smallest context."""
        live = [w for w in self.workers.values() if w.state is not WorkerState.FAILED]
        contexts = [w.max_context_tokens for w in live if w.max_context_tokens > 0]
        return DeploymentLimits(
            time_scales=tuple(sorted({w.time_scale for w in live})),
            max_context_tokens=min(contexts, default=0),
            max_event_bytes=max_event_bytes,
        )

    def check(self, request: SteeringRequest) -> None:
        """Raise ``RequestRefused`` unless the request can be carried out now."""
        match request:
            case DrainRequest():
                state = self.worker(request.worker_id).state
                if state is not WorkerState.ACTIVE:
                    raise RequestRefused(409, f"worker {request.worker_id} is {state.value}")
            case UndrainRequest():
                state = self.worker(request.worker_id).state
                if state not in (WorkerState.DRAINING, WorkerState.DRAINED):
                    raise RequestRefused(
                        409, f"worker {request.worker_id} is {state.value}, not drained"
                    )
            case ReprioritizeRequest() | AbortRequest():
                if isinstance(request, ReprioritizeRequest) and not math.isfinite(request.priority):
                    raise RequestRefused(
                        400, f"priority must be a finite number, not {request.priority}"
                    )
                trajectory = self.trajectory(request.rollout_id, request.traj_id)
                self._check_open(request.rollout_id)
                if trajectory.state.is_finished:
                    raise RequestRefused(
                        409, f"trajectory {request.traj_id} has {trajectory.state.value}"
                    )
            case CancelRequest():
                self._check_open(request.rollout_id)

    def _check_open(self, rollout_id: str) -> None:
        state = self.rollout(rollout_id).state
        if state is not RolloutState.RUNNING:
            raise RequestRefused(409, f"rollout {rollout_id} has {state.value}")

    # ---- the fold -----------------------------------------------------------------------------

    def decide(self, event: Event) -> list[Output]:
        if isinstance(event, (WorkerRegistered, WorkerDrained, WorkerFailed, WorkerRetired)):
            self._on_worker(event)
            return []
        if isinstance(event, (WorkerDrainRequested, WorkerUndrainRequested)):
            return self._on_drain_request(event)
        if isinstance(event, RolloutSubmitted):
            self.rollouts.setdefault(
                event.rollout_id,
                RolloutView(
                    event.policy, event.num_trajectories, event.occurred_at,
                    trainer=event.trainer or DEFAULT_TRAINER, time_scale=event.time_scale,
                ),
            )  # fmt: skip
            return []
        rollout = self.rollouts.get(event.rollout_id)
        if rollout is None:
            return []
        if isinstance(event, (RolloutFinished, RolloutCancelled, RolloutCancelRequested)):
            return self._on_rollout_end(event, rollout)
        return self._on_trajectory(event, rollout)

    def _on_worker(
        self, event: WorkerRegistered | WorkerDrained | WorkerFailed | WorkerRetired
    ) -> None:
        match event:
            case WorkerRegistered():
                held = self.workers.get(event.worker_id)
                self.workers[event.worker_id] = WorkerView(
                    event.engine,
                    trajectories=held.trajectories if held else set(),
                    time_scale=event.time_scale,
                    max_context_tokens=event.max_context_tokens,
                )
            case WorkerDrained():
                worker = self.workers.get(event.worker_id)
                if worker is not None and worker.state is WorkerState.DRAINING:
                    worker.state = WorkerState.DRAINED
            case WorkerFailed():
                worker = self.workers.get(event.worker_id)
                if worker is not None:
                    worker.state = WorkerState.FAILED
            case WorkerRetired():
                worker = self.workers.get(event.worker_id)
                if worker is not None:
                    worker.state = WorkerState.RETIRED

    def _on_drain_request(
        self, event: WorkerDrainRequested | WorkerUndrainRequested
    ) -> list[Output]:
        worker = self.workers.get(event.worker_id)
        if worker is None or worker.state in (WorkerState.FAILED, WorkerState.RETIRED):
            return []
        if isinstance(event, WorkerDrainRequested):
            if worker.state is not WorkerState.ACTIVE:
                return []
            worker.state = WorkerState.DRAINING
            return [drain_command(event)]
        if worker.state is WorkerState.ACTIVE:
            return []
        worker.state = WorkerState.ACTIVE
        return [undrain_command(event)]

    def _on_rollout_end(
        self,
        event: RolloutFinished | RolloutCancelled | RolloutCancelRequested,
        rollout: RolloutView,
    ) -> list[Output]:
        if rollout.state is not RolloutState.RUNNING:
            return []
        if isinstance(event, RolloutCancelRequested):
            why = f": {event.reason}" if event.reason else ""
            reason = f"cancelled by {event.operator}{why}"
            return [rollout_cancelled(event, reason)]
        is_cancel = isinstance(event, RolloutCancelled)
        rollout.state = RolloutState.CANCELLED if is_cancel else RolloutState.FINISHED
        rollout.reason = event.reason if isinstance(event, RolloutCancelled) else ""
        self._ended.append(event.rollout_id)
        while len(self._ended) > MAX_ENDED_ROLLOUTS:
            self._forget(self._ended.pop(0))
        return []

    def _forget(self, rollout_id: str) -> None:
        rollout = self.rollouts.pop(rollout_id, None)
        if rollout is None:
            return
        for traj_id, trajectory in rollout.trajectories.items():
            worker = self.workers.get(trajectory.worker_id)
            if worker is not None:
                worker.trajectories.discard((rollout_id, traj_id))

    def _on_trajectory(self, event: Event, rollout: RolloutView) -> list[Output]:
        traj_id: str = getattr(event, "traj_id", "")
        if isinstance(event, TrajectorySubmitted):
            rollout.trajectories.setdefault(traj_id, TrajectoryView(event.spec.index))
            return []
        trajectory = rollout.trajectories.get(traj_id)
        if trajectory is None or trajectory.state.is_finished:
            return []
        match event:
            case TrajectoryPlaced():
                self._move(event.rollout_id, traj_id, trajectory, event.worker_id)
            case Migrated():
                self._move(event.rollout_id, traj_id, trajectory, event.target_worker_id)
            case Prioritized():
                trajectory.priority = event.priority
            case TrajectoryReprioritizeRequested():
                trajectory.operator_actions.append(event.event_id)
                trajectory.priority, trajectory.is_pinned = event.priority, event.pin
            case TrajectoryAbortRequested():
                trajectory.operator_actions.append(event.event_id)
                return self._abort(event, trajectory, rollout.state)
            case Completed():
                self._finish(event.rollout_id, traj_id, trajectory, TrajectoryState.COMPLETED)
            case Failed() if not event.retryable:
                trajectory.reason = event.reason
                self._finish(event.rollout_id, traj_id, trajectory, TrajectoryState.FAILED)
        return []

    def _abort(
        self, event: TrajectoryAbortRequested, trajectory: TrajectoryView, state: RolloutState
    ) -> list[Output]:
        if state is not RolloutState.RUNNING:
            return []
        reason = f"aborted by {event.operator}" + (f": {event.reason}" if event.reason else "")
        if trajectory.worker_id:
            return [abort_command(event, trajectory.worker_id, reason)]
        return [unplaced_abort_failed(event, reason)]

    def _move(
        self, rollout_id: str, traj_id: str, trajectory: TrajectoryView, worker_id: str
    ) -> None:
        self._release(rollout_id, traj_id, trajectory)
        trajectory.state = TrajectoryState.PLACED
        trajectory.worker_id = worker_id
        if not trajectory.worker_history or trajectory.worker_history[-1] != worker_id:
            trajectory.worker_history.append(worker_id)
        worker = self.workers.get(worker_id)
        if worker is not None:
            worker.trajectories.add((rollout_id, traj_id))

    def _finish(
        self, rollout_id: str, traj_id: str, trajectory: TrajectoryView, state: TrajectoryState
    ) -> None:
        self._release(rollout_id, traj_id, trajectory)
        trajectory.state = state

    def _release(self, rollout_id: str, traj_id: str, trajectory: TrajectoryView) -> None:
        worker = self.workers.get(trajectory.worker_id)
        if worker is not None:
            worker.trajectories.discard((rollout_id, traj_id))
