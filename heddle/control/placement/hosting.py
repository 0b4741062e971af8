"""Hosting a trajectory on a worker: the ``TrajectoryPlaced`` fact and the ``StartTrajectory``
command that every placement (initial, re-routed step, re-placement) emits; the
``ContinueTrajectory`` of a step that runs where the trajectory is; and ``resume``, for a
trajectory admission paused between steps and now lets run (on its worker or another)."""

from __future__ import annotations

from enum import Enum

from heddle.control.decider import Output
from heddle.control.placement.placer import Assignment
from heddle.control.placement.state import PlacementState, TrajectoryRecord
from heddle.events import (
    ContinueTrajectory,
    Event,
    StartTrajectory,
    ToolReturned,
    TrajectoryPlaced,
)
from heddle.events.trajectory import PlacementReason
from heddle.ids import derive_id, epoch_part


class Arrival(Enum):
    """What a trajectory does on the worker it is placed on."""

    RUNS_STEP = "runs_step"
    """It runs a step there now (one of the worker's in-flight requests)."""
    AWAITS_TOOL = "awaits_tool"
    """It is in a tool call and waits there for the result."""


def host(
    state: PlacementState,
    event: Event,
    rollout_id: str,
    assignment: Assignment,
    trajectory: TrajectoryRecord,
    *,
    reason: PlacementReason,
    arrival: Arrival,
) -> list[Output]:
    """Move the trajectory's record to the assignment's worker under a new hosting number and
    say so; ids derive from the trajectory, its step, ``reason``, the worker it leaves and the
    hosting (replays re-emit the same)."""
    source = trajectory.worker_id
    state.stop_generating(trajectory)
    trajectory.worker_id = assignment.worker_id
    if arrival is Arrival.RUNS_STEP:
        trajectory.is_generating = True
        state.in_flight[assignment.worker_id] += 1
    traj_id = assignment.traj_id
    step = trajectory.step
    epoch = trajectory.next_epoch()
    hosting = (rollout_id, traj_id, step, reason, source or None, epoch_part(epoch))
    placed = TrajectoryPlaced(
        event_id=derive_id(*hosting, "placed"),
        rollout_id=rollout_id,
        occurred_at=event.occurred_at,
        traj_id=traj_id,
        worker_id=assignment.worker_id,
        reason=reason,
        group_rank=assignment.rank,
        tp_degree=state.workers[assignment.worker_id].tp_degree,
        epoch=epoch,
    )
    start = StartTrajectory(
        command_id=derive_id(*hosting, "start"),
        rollout_id=rollout_id,
        issued_at=event.occurred_at,
        worker_id=assignment.worker_id,
        traj_id=traj_id,
        spec=trajectory.spec,
        priority=trajectory.priority,
        resume=reason != "initial",
        source_worker_id=source,
        epoch=epoch,
    )
    return [placed, start]


def continue_step(
    state: PlacementState, issued_at: float, trajectory: TrajectoryRecord, tool_result: ToolReturned
) -> ContinueTrajectory:
    """The trajectory's next step runs on its worker, fed ``tool_result``."""
    trajectory.is_generating = True
    state.in_flight[trajectory.worker_id] = state.in_flight.get(trajectory.worker_id, 0) + 1
    step = tool_result.step + 1
    return ContinueTrajectory(
        command_id=derive_id(tool_result.rollout_id, tool_result.traj_id, step, "continue"),
        rollout_id=tool_result.rollout_id,
        issued_at=issued_at,
        worker_id=trajectory.worker_id,
        traj_id=tool_result.traj_id,
        step=step,
        tool_result=tool_result,
        priority=trajectory.priority,
    )


def resume(
    state: PlacementState, event: Event, rollout_id: str, traj_id: str, worker_id: str
) -> list[Output]:
    """Admission resumed a started trajectory on ``worker_id``: its held step runs (there, or
    on its worker, where its prefix is cached); one resumed in a tool call waits there for its
    result."""
    trajectory = state.rollouts[rollout_id].trajectories[traj_id]
    held, trajectory.held_step = trajectory.held_step, None
    if worker_id == trajectory.worker_id:
        return [] if held is None else [continue_step(state, event.occurred_at, trajectory, held)]
    assignment = Assignment(traj_id, worker_id, trajectory.rank)
    arrival = Arrival.AWAITS_TOOL if held is None else Arrival.RUNS_STEP
    return host(
        state, event, rollout_id, assignment, trajectory, reason="migration", arrival=arrival
    )
