"""What a worker does with each command: one pure decision, ``decide(state, command)``.

Every command a worker receives goes through here, the worker's own (``Drain``, ``Undrain``,
``LoadWeights``, ``Rejoin``, ``Retire``, ``Reshard``) and the trajectories' ones; the shell
(``heddle.workers.agent.commands.CommandHandler``) reads the state, asks, and carries out every
action of the decision (each ``Action`` has its case there; one it lacks is an error). No I/O,
clock or asyncio: every (state, command) pair is testable.

The worker's mode (``Mode``)::

    SERVING --Drain--> DRAINING --Undrain--> SERVING
       |                  |
       +-----Retire-------+-----Retire--> RETIRED     (absorbing: it takes nothing again)

A draining or retired worker refuses new trajectories (``REFUSE``: a retryable failure) and
serves the ones it hosts. Phases of a trajectory on the worker (``WORKER_PHASES``, the worker's
subset of ``heddle.events.TrajectoryPhase``, ``State.phase``)::

    ABSENT --start--> READY --segment--> GENERATING --tool request--> IN_TOOL --result--> READY
                                             |                           |
                                             +--done--> DONE             +--migrate--> HANDED_OVER

``ABSENT`` means this worker holds no record (a fresh start, an agent restarted since, or a
trajectory given back). Commands that need the trajectory's state on an ABSENT trajectory rebuild
it from the stream first (``RESUME``) and are then decided again on the rebuilt phase, which is
hosted (READY, GENERATING or IN_TOOL): that second decision never resumes again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

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
    TrajectoryPhase,
    Undrain,
    WorkerCommandT,
)

TrajectoryCommand = (
    StartTrajectory
    | ContinueTrajectory
    | Reprioritize
    | Preempt
    | MigrateOut
    | MigrateIn
    | Abort
    | Fence
)
TRAJECTORY_COMMANDS = (
    StartTrajectory,
    ContinueTrajectory,
    Reprioritize,
    Preempt,
    MigrateOut,
    MigrateIn,
    Abort,
    Fence,
)
"""The commands about one trajectory (``rollout_id``, ``traj_id``); the rest are the worker's."""

WORKER_PHASES = frozenset(
    (
        TrajectoryPhase.ABSENT,
        TrajectoryPhase.READY,
        TrajectoryPhase.GENERATING,
        TrajectoryPhase.IN_TOOL,
        TrajectoryPhase.HANDED_OVER,
        TrajectoryPhase.DONE,
    )
)
"""The phases a worker's trajectory table reports, and so the ones ``decide`` takes."""


class Mode(enum.Enum):
    """Whether the worker takes new trajectories (the diagram in the module docstring)."""

    SERVING = "serving"
    DRAINING = "draining"
    RETIRED = "retired"


class Action(enum.Enum):
    # ---- a trajectory's ----
    IGNORE = "ignore"
    """Acknowledge and do nothing: a duplicate, or a command that no longer applies (the KV
    blob a discarded ``MigrateIn`` carried is deleted)."""
    START = "start"
    """A fresh trajectory: reset the environment and run step 0."""
    RESUME = "resume"
    """Rebuild the trajectory from its events in the stream, then decide again."""
    RUN_NEXT = "run_next"
    """Feed the tool result to the environment and run the next step."""
    STORE_PRIORITY = "store_priority"
    """Remember the priority for the next generation."""
    SET_PRIORITY = "set_priority"
    """Change the priority of the generation running in the engine."""
    PREEMPT = "preempt"
    MIGRATE_NOW = "migrate_now"
    MIGRATE_AT_GAP = "migrate_at_gap"
    """Remember the request; migrate when the running step ends in a tool call."""
    ABORT = "abort"
    FORWARD = "forward"
    """Re-send the command to the worker the trajectory was handed to."""
    REFUSE = "refuse"
    """A draining or retired worker accepts no new trajectory: report it as retryable."""
    DROP = "drop"
    """A ``Fence``: stop working on the trajectory, publishing nothing more for it."""
    # ---- the worker's ----
    DRAIN = "drain"
    """Wait until no trajectory is hosted, then publish ``WorkerDrained``."""
    UNDRAIN = "undrain"
    """End a drain's wait without a report."""
    LOAD_WEIGHTS = "load_weights"
    """Swap the engine's weights at a safe point, then publish ``weights.loaded``."""
    REPORT_WEIGHTS = "report_weights"
    """The version is served already: publish ``weights.loaded`` again, load nothing."""
    REJOIN = "rejoin"
    """Declared failed: drop every trajectory and register as a new incarnation."""
    RETIRE = "retire"
    RESHARD = "reshard"


@dataclass(frozen=True, slots=True)
class State:
    """What a decision reads: the worker's and, for a trajectory's command, the trajectory's."""

    mode: Mode = Mode.SERVING
    incarnation: str = ""
    weight_version: int = 0
    """The version the engine serves."""
    phase: TrajectoryPhase = TrajectoryPhase.ABSENT
    """The named trajectory's phase here (one of ``WORKER_PHASES``)."""
    current_step: int = 0
    """The step in progress (GENERATING, IN_TOOL) or the next one (READY)."""
    epoch: int = 0
    """The hosting number the trajectory is held under here."""
    is_redelivered: bool = False
    """The command was delivered before: an earlier delivery may have run steps."""


@dataclass(frozen=True, slots=True)
class CommandDecision:
    mode: Mode
    """The worker's mode after the command."""
    actions: tuple[Action, ...]
    """To carry out, in order."""


def decide(state: State, command: WorkerCommandT) -> CommandDecision:
    """The decision on ``command`` in ``state``. ValueError for a phase outside
    ``WORKER_PHASES`` (no worker table reports it), TypeError for a non-command."""
    if state.phase not in WORKER_PHASES:
        raise ValueError(f"not a phase of a worker's trajectory: {state.phase.name}")
    mode = _next_mode(state.mode, command)
    return CommandDecision(mode, _actions(state, command))


def _next_mode(mode: Mode, command: WorkerCommandT) -> Mode:
    if mode is Mode.RETIRED or isinstance(command, Retire):
        return Mode.RETIRED
    match command:
        case Drain():
            return Mode.DRAINING
        case Undrain():
            return Mode.SERVING
    return mode


def _actions(state: State, command: WorkerCommandT) -> tuple[Action, ...]:
    match command:
        case Drain():
            return (Action.DRAIN,)
        case Undrain():
            return (Action.UNDRAIN,) if state.mode is Mode.DRAINING else (Action.IGNORE,)
        case LoadWeights():
            is_new = command.weight_version > state.weight_version
            return (Action.LOAD_WEIGHTS,) if is_new else (Action.REPORT_WEIGHTS,)
        case Rejoin():
            return (
                (Action.REJOIN,) if command.incarnation == state.incarnation else (Action.IGNORE,)
            )
        case Retire():
            return (Action.IGNORE,) if state.mode is Mode.RETIRED else (Action.RETIRE,)
        case Reshard():
            return (Action.RESHARD,)
        case Fence():
            is_held = state.phase.is_hosted and state.epoch <= command.epoch
            return (Action.DROP,) if is_held else (Action.IGNORE,)
        case StartTrajectory() | MigrateIn():
            return (_decide_placement(state, command),)
        case ContinueTrajectory():
            return (_decide_continue(state, command.step),)
        case Reprioritize():
            return _on_hosted(
                state.phase,
                generating=(Action.STORE_PRIORITY, Action.SET_PRIORITY),
                waiting=(Action.STORE_PRIORITY,),
            )
        case Preempt():
            return _on_hosted(state.phase, generating=(Action.PREEMPT,), waiting=(Action.IGNORE,))
        case MigrateOut():
            return _on_hosted(
                state.phase, generating=(Action.MIGRATE_AT_GAP,), waiting=(Action.MIGRATE_NOW,)
            )
        case Abort():
            return _on_hosted(state.phase, generating=(Action.ABORT,), waiting=(Action.ABORT,))
    raise TypeError(f"not a worker command: {type(command).__name__}")


def _decide_placement(state: State, command: StartTrajectory | MigrateIn) -> Action:
    is_resume = isinstance(command, MigrateIn) or command.resume
    phase = state.phase
    if phase is TrajectoryPhase.ABSENT or (phase is TrajectoryPhase.HANDED_OVER and is_resume):
        if state.mode is not Mode.SERVING:
            return Action.REFUSE
        # A start delivered before may have run steps (the stream holds its progress).
        return Action.RESUME if is_resume or state.is_redelivered else Action.START
    return Action.IGNORE


def _decide_continue(state: State, step: int) -> Action:
    match state.phase:
        case TrajectoryPhase.ABSENT:
            return Action.RESUME
        case TrajectoryPhase.HANDED_OVER:
            return Action.FORWARD
        case TrajectoryPhase.IN_TOOL if step == state.current_step + 1:
            return Action.RUN_NEXT
    return Action.IGNORE


def _on_hosted(
    phase: TrajectoryPhase, *, generating: tuple[Action, ...], waiting: tuple[Action, ...]
) -> tuple[Action, ...]:
    match phase:
        case TrajectoryPhase.ABSENT:
            return (Action.RESUME,)
        case TrajectoryPhase.HANDED_OVER:
            return (Action.FORWARD,)
        case TrajectoryPhase.GENERATING:
            return generating
        case TrajectoryPhase.READY | TrajectoryPhase.IN_TOOL:
            return waiting
    return (Action.IGNORE,)
