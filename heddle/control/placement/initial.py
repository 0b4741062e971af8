"""Initial placement: once a rollout's trajectories are all submitted (and, for a placer that
needs them, all predicted) and workers are known, a fresh placer places them; admission then says
which start now and where (``TrajectoryPlaced`` + ``StartTrajectory`` each), and the others
start as it lets them in.

A trajectory submitted after its rollout was placed (a stale one resubmitted afresh) is planned
on its own once it has its first prediction (at once for a placer that needs none): on the
candidate worker with the fewest in-flight requests, through admission like the others, outside
the placer's plan (the placer never ranks or migrates it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from heddle.control.decider import Output
from heddle.control.placement.admission import Admission, AdmissionRequest
from heddle.control.placement.hosting import Arrival, host, resume
from heddle.control.placement.placer import Assignment, PlacementRequest, Placer
from heddle.control.placement.state import PlacementState, RolloutRecord, TrajectoryRecord
from heddle.events import Event, Predicted, RolloutSubmitted, TrajectorySubmitted
from heddle.events.arrays import num_items


class InitialPlacement:
    def __init__(
        self, state: PlacementState, admission: Admission, make_placer: Callable[[], Placer]
    ) -> None:
        """``make_placer`` builds one placer per rollout (fresh state, seeded randomness)."""
        self._state = state
        self._admission = admission
        self._make_placer = make_placer
        self._needs_predictions = make_placer().needs_predictions

    def rollout_submitted(self, event: RolloutSubmitted) -> list[Output]:
        rollout = self._state.rollout(event.rollout_id)
        rollout.num_trajectories = event.num_trajectories
        rollout.submitted_at = event.occurred_at
        return self.place_ready(event)

    def trajectory_submitted(self, event: TrajectorySubmitted) -> list[Output]:
        rollout = self._state.rollout(event.rollout_id)
        if event.traj_id in rollout.trajectories:
            return self.place_ready(event)
        prompt_tokens = num_items(event.spec.prompt_token_ids)
        rollout.trajectories[event.traj_id] = TrajectoryRecord(
            event.spec, context_tokens=prompt_tokens
        )
        rollout.awaited.discard(event.traj_id)
        if rollout.placer is None:
            return self.place_ready(event)
        if self._needs_predictions:
            rollout.late.add(event.traj_id)
            return []
        return self._plan_late(event, event.rollout_id, event.traj_id, 0.0, 0.0)

    def first_prediction(self, event: Predicted) -> list[Output]:
        """A prediction before the first generation: what the placement waits for."""
        rollout = self._state.rollout(event.rollout_id)
        if rollout.placer is not None:
            if event.traj_id not in rollout.late:
                return []
            rollout.late.discard(event.traj_id)
            return self._plan_late(
                event,
                event.rollout_id,
                event.traj_id,
                event.predicted_remaining_tokens,
                event.predicted_remaining_tool_s,
            )
        rollout.first_predictions[event.traj_id] = event.predicted_remaining_tokens
        rollout.first_tool_predictions[event.traj_id] = event.predicted_remaining_tool_s
        return self.place_ready(event)

    def _plan_late(
        self,
        event: Event,
        rollout_id: str,
        traj_id: str,
        predicted_tokens: float,
        predicted_tool_s: float,
    ) -> list[Output]:
        candidates = self._state.candidates() or self._state.workers
        if not candidates:
            return []
        in_flight = self._state.in_flight
        worker_id = min(candidates, key=lambda worker: in_flight[worker])
        rollout = self._state.rollouts[rollout_id]
        self._admission.plan(
            _request(rollout_id, traj_id, rollout, worker_id, predicted_tokens, predicted_tool_s)
        )
        return self.start_admitted(event)

    def place_ready(self, event: Event) -> list[Output]:
        """Place every rollout that has become ready."""
        outputs: list[Output] = []
        for rollout_id, rollout in self._state.rollouts.items():
            if rollout.placer is None and self._is_ready(rollout):
                outputs += self._place(event, rollout_id, rollout)
        return outputs

    def start_admitted(self, event: Event) -> list[Output]:
        """Start every planned trajectory admission lets in now, where it says (or where its
        placer routes its first request), and resume the held steps it lets run."""
        outputs: list[Output] = []
        candidates = self._state.candidates()
        for (rollout_id, traj_id), worker_id in self._admission.admit(candidates):
            rollout = self._state.rollouts[rollout_id]
            trajectory = rollout.trajectories[traj_id]
            if worker_id is None:
                worker_id = self._route_first(rollout, traj_id, candidates)
            if trajectory.worker_id:
                outputs += resume(self._state, event, rollout_id, traj_id, worker_id)
                continue
            if rollout.placer is not None:  # admission may start it off its planned worker
                rollout.placer.on_moved(traj_id, worker_id)
            assignment = Assignment(traj_id, worker_id, trajectory.rank)
            outputs += host(
                self._state,
                event,
                rollout_id,
                assignment,
                trajectory,
                reason="initial",
                arrival=Arrival.RUNS_STEP,
            )
        return outputs

    def _route_first(self, rollout: RolloutRecord, traj_id: str, candidates: Iterable[str]) -> str:
        """The placer's worker for a first step it routes at the start, at the loads now."""
        in_flight = self._state.in_flight
        loads = {worker_id: in_flight[worker_id] for worker_id in candidates}
        if rollout.placer is None:  # no placer routes it: the least loaded takes it
            return min(loads, key=lambda worker_id: (loads[worker_id], worker_id))
        return rollout.placer.route_first(traj_id, loads)

    def _is_ready(self, rollout: RolloutRecord) -> bool:
        if not self._state.candidates() or not rollout.has_all_trajectories():
            return False
        return not self._needs_predictions or rollout.has_all_first_predictions()

    def _place(self, event: Event, rollout_id: str, rollout: RolloutRecord) -> list[Output]:
        """Plan the rollout with admission: the placer's assignments in its order, then (in
        submission order) the trajectories it routes when they start."""
        placer = self._make_placer()
        rollout.placer = placer
        requests = self._requests(rollout)
        assignments = placer.place(requests, list(self._state.candidates().values()))
        assigned = {assignment.traj_id for assignment in assignments}
        planned: list[tuple[str, str | None, int]] = [
            (assignment.traj_id, assignment.worker_id, assignment.rank)
            for assignment in assignments
        ]
        planned += [
            (request.traj_id, None, rank)
            for rank, request in enumerate(requests)
            if request.traj_id not in assigned
        ]
        for traj_id, worker_id, rank in planned:
            trajectory = rollout.trajectories[traj_id]
            trajectory.priority = rollout.priorities.pop(traj_id, trajectory.priority)
            trajectory.rank = rank
            tokens = rollout.first_predictions.get(traj_id, 0.0)
            tool_s = rollout.first_tool_predictions.get(traj_id, 0.0)
            self._admission.plan(_request(rollout_id, traj_id, rollout, worker_id, tokens, tool_s))
        rollout.priorities.clear()
        return self.start_admitted(event)

    @staticmethod
    def _requests(rollout: RolloutRecord) -> list[PlacementRequest]:
        """The rollout's trajectories in submission order, with their first predictions."""
        ordered = sorted(rollout.trajectories.items(), key=lambda item: item[1].spec.index)
        return [
            PlacementRequest(
                traj_id,
                rollout.first_predictions.get(traj_id, 0.0),
                num_items(trajectory.spec.prompt_token_ids),
                rollout.first_tool_predictions.get(traj_id, 0.0),
                group_id=trajectory.spec.group_id,
            )
            for traj_id, trajectory in ordered
        ]


def _request(
    rollout_id: str,
    traj_id: str,
    rollout: RolloutRecord,
    worker_id: str | None,
    predicted_tokens: float,
    predicted_tool_s: float,
) -> AdmissionRequest:
    """What admission is asked to plan for a trajectory on its planned worker."""
    trajectory = rollout.trajectories[traj_id]
    return AdmissionRequest(
        key=(rollout_id, traj_id),
        planned_worker_id=worker_id,
        submitted_at=rollout.submitted_at,
        index=trajectory.spec.index,
        context_tokens=trajectory.context_tokens,
        predicted_remaining_tokens=predicted_tokens,
        predicted_remaining_tool_s=predicted_tool_s,
        group_id=trajectory.spec.group_id,
    )
