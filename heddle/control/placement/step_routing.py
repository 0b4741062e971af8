"""Step routing: each tool result routes the trajectory's next step. The rollout's placer names
the worker: the current one gets ``ContinueTrajectory``; another gets ``TrajectoryPlaced`` +
``StartTrajectory(resume=True)`` (the trajectory re-prefills on arrival), unless it drains. A step
admission holds (``Admission.holds_step``: a paused program) waits for admission to resume it.

The routers weigh the workers' in-flight requests (a trajectory leaves them at ``ToolCalled``) and
the trajectory's context (grown by ``Generated`` and ``ToolReturned``).
"""

from __future__ import annotations

from heddle.control.decider import Output
from heddle.control.placement.admission import Admission
from heddle.control.placement.hosting import Arrival, continue_step, host
from heddle.control.placement.placer import Assignment
from heddle.control.placement.state import PlacementState
from heddle.events import Generated, ToolCalled, ToolReturned
from heddle.events.arrays import num_items


class StepRouting:
    def __init__(self, state: PlacementState, admission: Admission) -> None:
        self._state = state
        self._admission = admission

    def generated(self, event: Generated) -> None:
        trajectory = self._state.trajectory(event.rollout_id, event.traj_id)
        if trajectory is None:
            return
        trajectory.context_tokens += len(event.output_token_ids)
        trajectory.output_tokens += len(event.output_token_ids)
        trajectory.kv_version = event.weight_version
        self._admission.generated(event)
        self._admission.grew((event.rollout_id, event.traj_id), trajectory.context_tokens)

    def tool_called(self, event: ToolCalled) -> None:
        trajectory = self._state.trajectory(event.rollout_id, event.traj_id)
        if trajectory is not None:
            self._state.stop_generating(trajectory)

    def tool_returned(self, event: ToolReturned) -> list[Output]:
        """Route the next step (nothing for a duplicate or an unplaced trajectory)."""
        rollout = self._state.rollouts.get(event.rollout_id)
        trajectory = rollout.trajectories.get(event.traj_id) if rollout else None
        if rollout is None or trajectory is None or rollout.placer is None:
            return []
        step = event.step + 1
        if step <= trajectory.step:
            return []  # a duplicate: this step was routed already
        trajectory.step = step
        trajectory.context_tokens += num_items(event.output_token_ids)
        trajectory.tool_s += event.duration_s
        key = (event.rollout_id, event.traj_id)
        self._admission.tool_returned(key, event.duration_s)
        self._admission.grew(key, trajectory.context_tokens)
        if self._admission.holds_step(key):
            trajectory.held_step = event  # it runs when admission resumes it
            return []
        target = rollout.placer.route(
            event.traj_id, trajectory.worker_id, trajectory.context_tokens, self._state.in_flight
        )
        if target in self._state.draining:
            target = trajectory.worker_id  # a draining worker takes no trajectory of another
        if target != trajectory.worker_id:
            assignment = Assignment(event.traj_id, target, 0)
            return host(
                self._state,
                event,
                event.rollout_id,
                assignment,
                trajectory,
                reason="migration",
                arrival=Arrival.RUNS_STEP,
            )
        return [continue_step(self._state, event.occurred_at, trajectory, event)]
