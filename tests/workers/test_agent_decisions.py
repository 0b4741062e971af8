"""The command table of the worker agent: every (phase, command) pair has one intended action."""

from __future__ import annotations

import pytest

from heddle.events import (
    Abort,
    ContinueTrajectory,
    Drain,
    MigrateIn,
    MigrateOut,
    Preempt,
    Reprioritize,
    StartTrajectory,
    ToolReturned,
    TrajectoryPhase,
    TrajectorySpec,
    WorkerCommandT,
)
from heddle.workers.agent.decisions import WORKER_PHASES, Action, decide

SPEC = TrajectorySpec(group_id="g", index=0, environment="trace")
BASE = {"command_id": "c", "rollout_id": "r", "issued_at": 0.0, "worker_id": "w0"}
RESULT = ToolReturned(
    event_id="e",
    rollout_id="r",
    traj_id="t",
    occurred_at=0.0,
    step=2,
    call_id="k",
    tool="trace",
    status="ok",
)


def start(resume: bool = False) -> StartTrajectory:
    return StartTrajectory(**BASE, traj_id="t", spec=SPEC, resume=resume)


def cont(step: int) -> ContinueTrajectory:
    return ContinueTrajectory(**BASE, traj_id="t", step=step, tool_result=RESULT)


MIGRATE_IN = MigrateIn(**BASE, traj_id="t", spec=SPEC, source_worker_id="w1", migration_id="m")
REPRIO = Reprioritize(**BASE, traj_id="t", priority=3.0)
PREEMPT = Preempt(**BASE, traj_id="t")
MIGRATE_OUT = MigrateOut(**BASE, traj_id="t", target_worker_id="w1", migration_id="m")
ABORT = Abort(**BASE, traj_id="t")

P = TrajectoryPhase
A = Action
TABLE: list[tuple[WorkerCommandT, dict[TrajectoryPhase, Action]]] = [
    (
        start(),
        {
            P.ABSENT: A.START,
            P.READY: A.IGNORE,
            P.GENERATING: A.IGNORE,
            P.IN_TOOL: A.IGNORE,
            P.HANDED_OVER: A.IGNORE,
            P.DONE: A.IGNORE,
        },
    ),
    (
        start(resume=True),
        {
            P.ABSENT: A.RESUME,
            P.READY: A.IGNORE,
            P.GENERATING: A.IGNORE,
            P.IN_TOOL: A.IGNORE,
            P.HANDED_OVER: A.RESUME,
            P.DONE: A.IGNORE,
        },
    ),
    (
        MIGRATE_IN,
        {
            P.ABSENT: A.RESUME,
            P.READY: A.IGNORE,
            P.GENERATING: A.IGNORE,
            P.IN_TOOL: A.IGNORE,
            P.HANDED_OVER: A.RESUME,
            P.DONE: A.IGNORE,
        },
    ),
    (
        REPRIO,
        {
            P.ABSENT: A.RESUME,
            P.READY: A.STORE_PRIORITY,
            P.GENERATING: A.SET_PRIORITY,
            P.IN_TOOL: A.STORE_PRIORITY,
            P.HANDED_OVER: A.FORWARD,
            P.DONE: A.IGNORE,
        },
    ),
    (
        PREEMPT,
        {
            P.ABSENT: A.RESUME,
            P.READY: A.IGNORE,
            P.GENERATING: A.PREEMPT,
            P.IN_TOOL: A.IGNORE,
            P.HANDED_OVER: A.FORWARD,
            P.DONE: A.IGNORE,
        },
    ),
    (
        MIGRATE_OUT,
        {
            P.ABSENT: A.RESUME,
            P.READY: A.MIGRATE_NOW,
            P.GENERATING: A.MIGRATE_AT_GAP,
            P.IN_TOOL: A.MIGRATE_NOW,
            P.HANDED_OVER: A.FORWARD,
            P.DONE: A.IGNORE,
        },
    ),
    (
        ABORT,
        {
            P.ABSENT: A.RESUME,
            P.READY: A.ABORT,
            P.GENERATING: A.ABORT,
            P.IN_TOOL: A.ABORT,
            P.HANDED_OVER: A.FORWARD,
            P.DONE: A.IGNORE,
        },
    ),
]


@pytest.mark.parametrize(("command", "expected"), TABLE)
def test_every_phase_of_every_trajectory_command(
    command: WorkerCommandT, expected: dict[TrajectoryPhase, Action]
) -> None:
    assert set(expected) == WORKER_PHASES
    for phase, action in expected.items():
        assert decide(phase, command, current_step=1) is action, (phase, type(command).__name__)


def test_continue_runs_only_the_step_after_the_tool_call() -> None:
    assert decide(TrajectoryPhase.IN_TOOL, cont(2), current_step=1) is Action.RUN_NEXT
    assert decide(TrajectoryPhase.IN_TOOL, cont(1), current_step=1) is Action.IGNORE  # stale
    assert decide(TrajectoryPhase.IN_TOOL, cont(3), current_step=1) is Action.IGNORE
    assert (
        decide(TrajectoryPhase.READY, cont(2), current_step=2) is Action.IGNORE
    )  # result already known
    assert (
        decide(TrajectoryPhase.GENERATING, cont(2), current_step=2) is Action.IGNORE
    )  # redelivery
    assert decide(TrajectoryPhase.ABSENT, cont(2)) is Action.RESUME
    assert decide(TrajectoryPhase.HANDED_OVER, cont(2)) is Action.FORWARD
    assert decide(TrajectoryPhase.DONE, cont(2)) is Action.IGNORE


def test_draining_refuses_new_trajectories_but_keeps_serving_hosted_ones() -> None:
    assert decide(TrajectoryPhase.ABSENT, start(), is_draining=True) is Action.REFUSE
    assert decide(TrajectoryPhase.ABSENT, MIGRATE_IN, is_draining=True) is Action.REFUSE
    assert (
        decide(TrajectoryPhase.IN_TOOL, cont(2), current_step=1, is_draining=True)
        is Action.RUN_NEXT
    )
    drain = Drain(**BASE)
    assert decide(TrajectoryPhase.ABSENT, drain) is Action.DRAIN


def test_hosted_phases() -> None:
    assert {phase for phase in TrajectoryPhase if phase.is_hosted} == {
        TrajectoryPhase.READY,
        TrajectoryPhase.GENERATING,
        TrajectoryPhase.IN_TOOL,
    }


@pytest.mark.parametrize(
    "phase", sorted(set(TrajectoryPhase) - WORKER_PHASES, key=lambda phase: phase.value)
)
def test_phases_no_worker_reports_are_refused(phase: TrajectoryPhase) -> None:
    with pytest.raises(ValueError, match="not a phase of a worker"):
        decide(phase, cont(2))
