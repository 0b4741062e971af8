"""Failure re-placement: when a worker fails, every trajectory it held goes to the live worker with
the fewest in-flight requests (a draining one only when no other is left):
``TrajectoryPlaced(reason="replacement")`` + ``StartTrajectory(resume=True)``. A worker retired for
a re-shard hands every trajectory it held to its successor, the re-shard's leader
(``reason="reshard"``; the leader holds them until its new engine is up), or, if that one is
gone too, to the least loaded as for a failure. A trajectory a
worker hands back with a retryable ``Failed`` (it refused the command while draining, or its
engine aborted the generation) is re-placed the same way, on another worker where there is one."""

from __future__ import annotations

from heddle.control.decider import Output
from heddle.control.placement.admission import Admission
from heddle.control.placement.hosting import Arrival, host
from heddle.control.placement.placer import Assignment, Placer
from heddle.control.placement.state import PlacementState, TrajectoryRecord
from heddle.events import Event, Failed, WorkerFailed, WorkerRetired
from heddle.events.trajectory import PlacementReason


class FailureReplacement:
    def __init__(self, state: PlacementState, admission: Admission) -> None:
        self._state = state
        self._admission = admission

    def replace(self, event: WorkerFailed | WorkerRetired) -> list[Output]:
        """Forget the (known) failed or retired worker and re-place what it held."""
        state = self._state
        successor = ""
        reason: PlacementReason = "replacement"
        if isinstance(event, WorkerRetired) and event.successor_worker_id in state.workers:
            successor, reason = event.successor_worker_id, "reshard"
        del state.workers[event.worker_id]
        state.in_flight.pop(event.worker_id, None)
        self._admission.remove_worker(event.worker_id)
        outputs: list[Output] = []
        for rollout_id, rollout in state.rollouts.items():
            if rollout.placer is None:
                continue
            rollout.placer.on_worker_failed(event.worker_id)
            for traj_id, trajectory in rollout.trajectories.items():
                if trajectory.worker_id == event.worker_id:
                    outputs += self._replace(
                        event,
                        rollout_id,
                        rollout.placer,
                        traj_id,
                        trajectory,
                        target=successor,
                        reason=reason,
                    )
        return outputs

    def retry(self, event: Failed) -> list[Output]:
        """Re-place a trajectory handed back by a retryable failure (a known, placed one)."""
        rollout = self._state.rollouts.get(event.rollout_id)
        trajectory = rollout.trajectories.get(event.traj_id) if rollout is not None else None
        if rollout is None or rollout.placer is None or trajectory is None:
            return []
        rollout_id, traj_id = event.rollout_id, event.traj_id
        return self._replace(
            event, rollout_id, rollout.placer, traj_id, trajectory, avoid=event.worker_id
        )

    def _replace(
        self,
        event: Event,
        rollout_id: str,
        placer: Placer,
        traj_id: str,
        trajectory: TrajectoryRecord,
        *,
        avoid: str = "",
        target: str = "",
        reason: PlacementReason = "replacement",
    ) -> list[Output]:
        """Host the trajectory on ``target`` (default: the least loaded candidate)."""
        candidates = self._state.candidates() or self._state.workers
        if not candidates:
            return []
        if not target:
            in_flight = self._state.in_flight
            others = [worker for worker in candidates if worker != avoid] or list(candidates)
            target = min(others, key=lambda worker: in_flight[worker])
        was_generating = trajectory.is_generating
        trajectory.is_generating = False  # its old worker's count is gone
        outputs = host(
            self._state,
            event,
            rollout_id,
            Assignment(traj_id, target, 0),
            trajectory,
            reason=reason,
            arrival=Arrival.RUNS_STEP if was_generating else Arrival.AWAITS_TOOL,
        )
        placer.on_moved(traj_id, target)
        self._admission.moved((rollout_id, traj_id), target)
        return outputs
