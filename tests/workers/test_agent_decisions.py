"""The worker's one decision, ``decide(state, command) -> CommandDecision``: every (phase, command)
pair of a trajectory has one intended action (a reference table), the worker's own commands move
its mode as the diagram says, any sequence of commands keeps the decision's invariants, and the
module stays pure."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.events import (
    Abort,
    ContinueTrajectory,
    Drain,
    Fence,
    LoadWeights,
    MigrateIn,
    MigrateOut,
    Preempt,
    Rejoin,
    Reprioritize,
    Reshard,
    Retire,
    StartTrajectory,
    ToolReturned,
    TrajectoryPhase,
    TrajectorySpec,
    Undrain,
    WeightSource,
    WorkerCommandT,
)
from heddle.workers.agent import WorkerAgent, WorkerConfig, decisions
from heddle.workers.agent.decisions import (
    WORKER_PHASES,
    Action,
    CommandDecision,
    Mode,
    State,
    decide,
)
from heddle.workers.engines.simulated import SimulatedEngine, SimulatedEngineOptions

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


def load(version: int) -> LoadWeights:
    return LoadWeights(**BASE, weight_version=version, source=WeightSource(path="/w"))


MIGRATE_IN = MigrateIn(**BASE, traj_id="t", spec=SPEC, source_worker_id="w1", migration_id="m")
REPRIO = Reprioritize(**BASE, traj_id="t", priority=3.0)
PREEMPT = Preempt(**BASE, traj_id="t")
MIGRATE_OUT = MigrateOut(**BASE, traj_id="t", target_worker_id="w1", migration_id="m")
ABORT = Abort(**BASE, traj_id="t")
DRAIN = Drain(**BASE)
UNDRAIN = Undrain(**BASE)
RETIRE = Retire(**BASE, reshard_id="s", successor_worker_id="w1")
RESHARD = Reshard(**BASE, reshard_id="s", tp_degree=2, gpu_ids=[0, 1])


def actions(phase: TrajectoryPhase, command: WorkerCommandT, **kw: object) -> tuple[Action, ...]:
    return decide(State(phase=phase, **kw), command).actions  # type: ignore[arg-type]


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
        got = actions(phase, command, current_step=1)
        if action is A.SET_PRIORITY:  # the priority is also kept for the next generation
            assert got == (A.STORE_PRIORITY, A.SET_PRIORITY), phase
        else:
            assert got == (action,), (phase, type(command).__name__)


def test_continue_runs_only_the_step_after_the_tool_call() -> None:
    assert actions(P.IN_TOOL, cont(2), current_step=1) == (A.RUN_NEXT,)
    assert actions(P.IN_TOOL, cont(1), current_step=1) == (A.IGNORE,)  # stale
    assert actions(P.IN_TOOL, cont(3), current_step=1) == (A.IGNORE,)
    assert actions(P.READY, cont(2), current_step=2) == (A.IGNORE,)  # result already known
    assert actions(P.GENERATING, cont(2), current_step=2) == (A.IGNORE,)  # redelivery
    assert actions(P.ABSENT, cont(2)) == (A.RESUME,)
    assert actions(P.HANDED_OVER, cont(2)) == (A.FORWARD,)
    assert actions(P.DONE, cont(2)) == (A.IGNORE,)


def test_a_redelivered_start_rebuilds_first() -> None:
    """An earlier delivery may have run steps: the stream holds its progress."""
    assert actions(P.ABSENT, start(), is_redelivered=True) == (A.RESUME,)


@pytest.mark.parametrize("mode", [Mode.DRAINING, Mode.RETIRED])
def test_a_draining_or_retired_worker_refuses_new_trajectories_and_serves_hosted_ones(
    mode: Mode,
) -> None:
    assert actions(P.ABSENT, start(), mode=mode) == (A.REFUSE,)
    assert actions(P.ABSENT, MIGRATE_IN, mode=mode) == (A.REFUSE,)
    assert actions(P.IN_TOOL, cont(2), current_step=1, mode=mode) == (A.RUN_NEXT,)


def test_drain_and_undrain_move_the_mode_and_are_acted_on() -> None:
    assert decide(State(), DRAIN) == CommandDecision(Mode.DRAINING, (A.DRAIN,))
    assert decide(State(Mode.DRAINING), DRAIN) == CommandDecision(Mode.DRAINING, (A.DRAIN,))
    assert decide(State(Mode.DRAINING), UNDRAIN) == CommandDecision(Mode.SERVING, (A.UNDRAIN,))
    assert decide(State(), UNDRAIN) == CommandDecision(Mode.SERVING, (A.IGNORE,))


def test_retiring_is_for_good() -> None:
    assert decide(State(), RETIRE) == CommandDecision(Mode.RETIRED, (A.RETIRE,))
    assert decide(State(Mode.RETIRED), RETIRE) == CommandDecision(Mode.RETIRED, (A.IGNORE,))
    assert decide(State(Mode.RETIRED), UNDRAIN) == CommandDecision(Mode.RETIRED, (A.IGNORE,))
    assert decide(State(Mode.RETIRED), DRAIN) == CommandDecision(Mode.RETIRED, (A.DRAIN,))


def test_a_weight_version_served_already_is_reported_not_loaded() -> None:
    assert actions(P.ABSENT, load(3), weight_version=2) == (A.LOAD_WEIGHTS,)
    assert actions(P.ABSENT, load(2), weight_version=2) == (A.REPORT_WEIGHTS,)
    assert actions(P.ABSENT, load(1), weight_version=2) == (A.REPORT_WEIGHTS,)


def test_a_rejoin_of_another_incarnation_is_ignored() -> None:
    rejoin = Rejoin(**BASE, incarnation="i1")
    assert actions(P.ABSENT, rejoin, incarnation="i1") == (A.REJOIN,)
    assert actions(P.ABSENT, rejoin, incarnation="i2") == (A.IGNORE,)


def test_a_fence_drops_the_fenced_hosting_or_an_older_one_only() -> None:
    fence = Fence(**BASE, traj_id="t", epoch=3)
    for phase in (P.READY, P.GENERATING, P.IN_TOOL):
        assert actions(phase, fence, epoch=3) == (A.DROP,)
        assert actions(phase, fence, epoch=2) == (A.DROP,)
        assert actions(phase, fence, epoch=4) == (A.IGNORE,)  # a newer hosting here
    for phase in (P.ABSENT, P.HANDED_OVER, P.DONE):
        assert actions(phase, fence, epoch=1) == (A.IGNORE,)


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
        decide(State(phase=phase), cont(2))


# ---- any sequence of commands ------------------------------------------------------------------

COMMANDS: list[WorkerCommandT] = [
    start(), start(resume=True), MIGRATE_IN, cont(1), cont(2), REPRIO, PREEMPT, MIGRATE_OUT, ABORT,
    Fence(**BASE, traj_id="t", epoch=2), DRAIN, UNDRAIN, load(1), load(3),
    Rejoin(**BASE, incarnation="i"), Rejoin(**BASE, incarnation="other"), RETIRE, RESHARD,
]  # fmt: skip
NEEDS_A_ROW = {
    A.RUN_NEXT, A.STORE_PRIORITY, A.SET_PRIORITY, A.PREEMPT, A.MIGRATE_NOW, A.MIGRATE_AT_GAP,
    A.ABORT, A.DROP,
}  # fmt: skip
"""Actions the shell carries out on the trajectory's row (a hosted phase has one)."""
PLACING = (StartTrajectory, MigrateIn)
STATES = st.builds(
    State,
    phase=st.sampled_from(sorted(WORKER_PHASES, key=lambda phase: phase.value)),
    incarnation=st.sampled_from(["i", "j"]),
    weight_version=st.integers(0, 4),
    current_step=st.integers(0, 3),
    epoch=st.integers(0, 4),
    is_redelivered=st.booleans(),
)


@given(st.lists(st.tuples(STATES, st.sampled_from(COMMANDS)), max_size=40))
def test_any_sequence_of_commands_keeps_the_invariants(
    steps: list[tuple[State, WorkerCommandT]],
) -> None:
    mode = Mode.SERVING
    for state, command in steps:
        state = State(
            mode,
            incarnation=state.incarnation,
            weight_version=state.weight_version,
            phase=state.phase,
            current_step=state.current_step,
            epoch=state.epoch,
            is_redelivered=state.is_redelivered,
        )
        decision = decide(state, command)
        assert decision.actions, "every command is answered"
        assert len(set(decision.actions)) == len(decision.actions)
        # Retiring is for good; otherwise Drain and Undrain alone move the mode.
        if mode is Mode.RETIRED or isinstance(command, Retire):
            assert decision.mode is Mode.RETIRED
        elif isinstance(command, Drain):
            assert decision.mode is Mode.DRAINING
        elif isinstance(command, Undrain):
            assert decision.mode is Mode.SERVING
        else:
            assert decision.mode is mode
        # Only a serving worker takes a new trajectory.
        if A.START in decision.actions or (
            A.RESUME in decision.actions and isinstance(command, PLACING)
        ):
            assert mode is Mode.SERVING
        # Actions on the row only where there is one; a rebuilt (hosted) trajectory's second
        # decision never rebuilds, starts, refuses or forwards again.
        if not state.phase.is_hosted:
            assert not NEEDS_A_ROW & set(decision.actions)
        else:
            assert not {A.RESUME, A.START, A.REFUSE, A.FORWARD} & set(decision.actions)
        mode = decision.mode


def test_every_action_is_decided_somewhere() -> None:
    """No action exists that no decision returns (as ``DRAIN`` was, unacted on)."""
    decided = {
        action
        for command in COMMANDS
        for mode in Mode
        for phase in WORKER_PHASES
        for step in (0, 1)
        for redelivered in (False, True)
        for action in decide(
            State(mode, "i", 2, phase, current_step=step, epoch=2, is_redelivered=redelivered),
            command,
        ).actions
    }
    assert decided == set(Action)


def test_the_decision_is_pure() -> None:
    """No I/O, clock or asyncio: only data types of heddle.events and the standard enum and
    dataclasses modules."""
    tree = ast.parse(Path(decisions.__file__).read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert imported <= {"__future__", "enum", "dataclasses", "heddle.events"}


# ---- the dispatcher acts on every worker-wide action -------------------------------------------


class Sink:
    """Stores nothing, refuses nothing (the agent's registration)."""

    async def publish(self, message: object) -> None: ...

    async def publish_telemetry(self, telemetry: object) -> None: ...


class RecordingAgent(WorkerAgent):
    """The agent with its worker-wide actions recorded instead of carried out (a fake around
    the dispatcher under test)."""

    def __init__(self) -> None:
        sink = Sink()
        engine = SimulatedEngine(SimulatedEngineOptions(time_scale=1000.0))
        config = WorkerConfig(worker_id="w0")
        super().__init__(config, engine, sink=sink, history=sink, blobs=sink)  # type: ignore[arg-type]
        self.calls: list[str] = []

    async def drain(self, command: Drain) -> None:
        self.calls.append("drain")

    def undrain(self) -> None:
        self.calls.append("undrain")

    async def load_weights(self, command: LoadWeights, *, is_new: bool) -> None:
        self.calls.append(f"load_weights {command.weight_version} {is_new}")

    async def rejoin(self, command: Rejoin) -> None:
        self.calls.append("rejoin")

    async def retire(self, command: Retire) -> None:
        self.calls.append("retire")

    async def reshard(self, command: Reshard) -> None:
        self.calls.append("reshard")


async def test_the_dispatcher_carries_out_every_worker_wide_action() -> None:
    agent = RecordingAgent()
    commands: list[WorkerCommandT] = [
        DRAIN, UNDRAIN, UNDRAIN, load(1), load(0), Rejoin(**BASE, incarnation=agent.incarnation),
        Rejoin(**BASE, incarnation="another"), RESHARD, RETIRE, RETIRE, UNDRAIN, DRAIN,
    ]  # fmt: skip
    for command in commands:
        await agent.handle(command)
    assert agent.calls == [
        "drain", "undrain", "load_weights 1 True", "load_weights 0 False", "rejoin", "reshard",
        "retire", "drain",
    ]  # fmt: skip
    assert agent.handler.mode is Mode.RETIRED
