"""The placement decider (the router of the paper's s.5): it keeps the workers and rollouts
(``PlacementState``) and hands each event to the strategy it concerns; see the package map.

Consumes:

- ``WorkerRegistered``: a live worker (id, TP degree, KV capacity for admission); rollouts waiting
  for workers are placed. A known worker registering at another TP degree (a re-shard's leader
  relaunched) is weighed at its new degree and capacity from then on. ``WorkerFailed``:
  ``FailureReplacement``.
- ``ReshardRequested``: its members take no new trajectory, and no migration leaves or targets
  them, until the leader registers again; ``WorkerRetired``: ``FailureReplacement`` hands the
  member's trajectories to the leader.
- ``WorkerDrainRequested`` / ``WorkerUndrainRequested``: ``OperatorDrain``.
- ``RolloutSubmitted``, ``TrajectorySubmitted``, a first ``Predicted`` (``step = -1``):
  ``InitialPlacement``.
- ``Prioritized``: the priority stamped on the trajectory's next request.
- ``Generated``, ``ToolCalled``, ``ToolReturned``: ``StepRouting``.
- a later ``Predicted`` and ``Migrated``: ``MigrationRequests``.
- a retryable ``Failed``: ``FailureReplacement`` places the trajectory again.
- ``WeightsPublished`` / ``WeightsLoaded``: which workers must still swap weights and whose KV
  a swap makes stale (``WeightSwaps``), for the moves a later prediction calls for.
- ``Completed`` / a final ``Failed``: the trajectory is forgotten; once all of a rollout's
  are (and no resubmission a stale one's ``Failed`` announced is still to come), the rollout
  is, and its later events are ignored.

Admission (``Admission``) is asked which planned trajectories start whenever room may have
appeared: a worker registered, was undrained or failed, a rollout was placed, a trajectory was
re-predicted, moved or ended, or admission's periodic check (``Admission.tick``, told the time
of every event) let some start or resume.
"""

from __future__ import annotations

from collections.abc import Callable

from heddle.control.decider import Output
from heddle.control.placement.admission import Admission, AdmitAll
from heddle.control.placement.drain import OperatorDrain
from heddle.control.placement.initial import InitialPlacement
from heddle.control.placement.migration import MigrationRequests
from heddle.control.placement.placer import Placer
from heddle.control.placement.replacement import FailureReplacement
from heddle.control.placement.state import PlacementState, is_first_prediction
from heddle.control.placement.step_routing import StepRouting
from heddle.control.placement.weight_swaps import WeightSwaps
from heddle.events import (
    Completed,
    Event,
    Failed,
    Generated,
    Migrated,
    Predicted,
    Prioritized,
    ReshardRequested,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectorySubmitted,
    WeightsLoaded,
    WeightsPublished,
    WorkerDrainRequested,
    WorkerFailed,
    WorkerRegistered,
    WorkerRetired,
    WorkerUndrainRequested,
)


class PlacementDecider:
    name = "placement"
    handles: frozenset[type[Event]] = frozenset(
        {
            WorkerRegistered,
            WorkerFailed,
            ReshardRequested,
            WorkerRetired,
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
            WeightsPublished,
            WeightsLoaded,
        }
    )

    def __init__(
        self,
        make_placer: Callable[[], Placer],
        *,
        admission: Admission | None = None,
        weight_load_s_for_tp: Callable[[int], float] | None = None,
    ) -> None:
        """``make_placer`` builds one placer per rollout (fresh state, seeded randomness);
        ``admission``: when placed trajectories start (default ``AdmitAll``: at once);
        ``weight_load_s_for_tp``: a swapping worker's load pause, by TP degree (None: not
        counted)."""
        self._state = PlacementState(WeightSwaps(weight_load_s_for_tp))
        self._admission: Admission = admission if admission is not None else AdmitAll()
        self._initial = InitialPlacement(self._state, self._admission, make_placer)
        self._routing = StepRouting(self._state, self._admission)
        self._migration = MigrationRequests(self._state, self._admission)
        self._replacement = FailureReplacement(self._state, self._admission)
        self._drain = OperatorDrain(self._state)

    def worker_of(self, rollout_id: str, traj_id: str) -> str:
        trajectory = self._state.trajectory(rollout_id, traj_id)
        return trajectory.worker_id if trajectory else ""

    def decide(self, event: Event) -> list[Output]:
        if event.rollout_id in self._state.ended:
            return []
        outputs = self._handle(event)
        if self._admission.tick(event.occurred_at):  # a periodic check let some run
            outputs += self._start_admitted(event)
        return outputs

    def _handle(self, event: Event) -> list[Output]:
        match event:
            case WeightsPublished():
                self._state.weights.published(event)
            case WeightsLoaded():
                self._state.weights.loaded(event)
            case WorkerRegistered():
                return self._worker_registered(event)
            case WorkerFailed() | WorkerRetired():
                return self._worker_failed(event)
            case ReshardRequested():
                self._reshard_requested(event)
            case WorkerDrainRequested():
                self._drain.drain(event)
            case WorkerUndrainRequested():
                if self._drain.undrain(event):
                    return self._initial.place_ready(event) + self._start_admitted(event)
            case RolloutSubmitted():
                return self._initial.rollout_submitted(event)
            case TrajectorySubmitted():
                return self._initial.trajectory_submitted(event)
            case Predicted():
                return self._predicted(event)
            case Prioritized():
                self._state.set_priority(event)
            case Generated():
                self._routing.generated(event)
            case ToolCalled():
                self._routing.tool_called(event)
            case ToolReturned():
                return self._routing.tool_returned(event)
            case Migrated():
                self._migration.migrated(event)
                return self._start_admitted(event)
            case Failed() if event.retryable:
                return self._replacement.retry(event) + self._start_admitted(event)
            case Failed() if event.resubmitted_as:
                self._state.rollout(event.rollout_id).awaited.add(event.resubmitted_as)
                self._finished(event.rollout_id, event.traj_id)
                return self._start_admitted(event)
            case Completed() | Failed():
                if self._refused(event.rollout_id, event.traj_id):
                    return self._initial.place_ready(event) + self._start_admitted(event)
                self._finished(event.rollout_id, event.traj_id)
                return self._start_admitted(event)
        return []

    def _refused(self, rollout_id: str, traj_id: str) -> bool:
        """Whether this ends a trajectory of a rollout not placed yet that was never submitted
        (its submission dead-lettered): the rollout no longer waits for it."""
        rollout = self._state.rollouts.get(rollout_id)
        if rollout is None or rollout.placer is not None or traj_id in rollout.trajectories:
            return False
        rollout.refused.add(traj_id)
        return True

    def snapshot(self) -> tuple[object, ...]:
        """The state, as a comparable value (replay tests): workers, in-flight counts, per
        rollout its trajectories, first predictions and the placer's view of them, ended
        rollouts, admission's state, draining workers, weight swaps, re-sharding members."""
        workers, in_flight, rollouts, ended, draining, weights, resharding = self._state.snapshot()
        admission = self._admission.snapshot()
        return workers, in_flight, rollouts, ended, admission, draining, weights, resharding

    def _start_admitted(self, event: Event) -> list[Output]:
        return self._initial.start_admitted(event)

    def _worker_registered(self, event: WorkerRegistered) -> list[Output]:
        state = self._state
        self._drain.forget(event.worker_id)
        self._end_reshard(event.worker_id)
        state.weights.registered(event.worker_id)
        if state.add_worker(event.worker_id, event.tp_degree):
            self._admission.add_worker(event.worker_id, event.max_kv_tokens)
        elif state.resize_worker(event.worker_id, event.tp_degree):
            self._admission.add_worker(event.worker_id, event.max_kv_tokens)
            for rollout in state.rollouts.values():
                if rollout.placer is not None:
                    rollout.placer.on_worker_resized(event.worker_id, event.tp_degree)
        return self._initial.place_ready(event) + self._start_admitted(event)

    def _worker_failed(self, event: WorkerFailed | WorkerRetired) -> list[Output]:
        self._drain.forget(event.worker_id)
        self._state.weights.forget(event.worker_id)
        self._state.resharding.pop(event.worker_id, None)
        if isinstance(event, WorkerFailed):
            self._end_reshard(event.worker_id)
        if event.worker_id not in self._state.workers:
            return []
        return self._replacement.replace(event) + self._start_admitted(event)

    def _reshard_requested(self, event: ReshardRequested) -> None:
        """The members take nothing new (the others retire; the leader relaunches)."""
        for member in event.member_worker_ids:
            if member in self._state.workers:
                self._state.resharding[member] = event.worker_id
                if member != event.worker_id:
                    self._state.draining.add(member)

    def _end_reshard(self, leader_id: str) -> None:
        """The leader registered again or failed: its re-shard is over."""
        resharding = self._state.resharding
        for member in [m for m, leader in resharding.items() if leader == leader_id]:
            del resharding[member]

    def _predicted(self, event: Predicted) -> list[Output]:
        if is_first_prediction(event):
            return self._initial.first_prediction(event)
        rollout = self._state.rollout(event.rollout_id)
        trajectory = rollout.trajectories.get(event.traj_id)
        if trajectory is None or rollout.placer is None:
            return []
        key = (event.rollout_id, event.traj_id)
        self._admission.predicted(
            key, event.predicted_remaining_tokens, event.predicted_remaining_tool_s
        )
        outputs = self._migration.request(event, rollout.placer, trajectory)
        return outputs + self._start_admitted(event)

    def _finished(self, rollout_id: str, traj_id: str) -> None:
        rollout = self._state.rollouts.get(rollout_id)
        trajectory = rollout.trajectories.pop(traj_id, None) if rollout else None
        if rollout is None or trajectory is None:
            return
        self._admission.finished((rollout_id, traj_id))
        self._state.stop_generating(trajectory)
        if rollout.placer is not None:
            rollout.placer.on_finished(traj_id)
            if not rollout.trajectories and not rollout.awaited:
                del self._state.rollouts[rollout_id]
                self._state.ended.add(rollout_id)
