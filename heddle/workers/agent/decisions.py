"""What a worker does with each command, given the phase of the trajectory it names.

A pure table: ``decide(phase, command, ...) -> Action``. The agent computes the phase from its
local trajectory table (and the trajectory's log) and then carries out the action. Keeping the
table apart from the side effects makes every (phase, command) pair testable.

Phases of a hosted trajectory (``WORKER_PHASES``, the worker's subset of
``heddle.events.TrajectoryPhase``)::

    ABSENT --start--> READY --engine--> GENERATING --tool request--> IN_TOOL --result--> READY
                                            |                           |
                                            +--done--> DONE             +--migrate--> HANDED_OVER

``ABSENT`` means this worker holds no record (a fresh start, or an agent restarted since). Commands
that need the trajectory's state on an ABSENT trajectory rebuild it from the stream first
(``RESUME``) and are then decided again on the rebuilt phase.
"""

from __future__ import annotations

import enum

from heddle.events import (
    Abort,
    ContinueTrajectory,
    Drain,
    MigrateIn,
    MigrateOut,
    Preempt,
    Reprioritize,
    StartTrajectory,
    TrajectoryPhase,
    WorkerCommandT,
)

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


class Action(enum.Enum):
    IGNORE = "ignore"
    """Acknowledge and do nothing: a duplicate, or a command that no longer applies."""
    START = "start"
    """A fresh trajectory: reset the environment and run step 0."""
    RESUME = "resume"
    """Rebuild the trajectory from its events in the stream, then decide again."""
    RUN_NEXT = "run_next"
    """Feed the tool result to the environment and run the next step."""
    SET_PRIORITY = "set_priority"
    """Change the priority of the generation in the engine."""
    STORE_PRIORITY = "store_priority"
    """Remember the priority for the next generation."""
    PREEMPT = "preempt"
    MIGRATE_NOW = "migrate_now"
    MIGRATE_AT_GAP = "migrate_at_gap"
    """Remember the request; migrate when the running step ends in a tool call."""
    ABORT = "abort"
    FORWARD = "forward"
    """Re-send the command to the worker the trajectory was handed to."""
    REFUSE = "refuse"
    """A draining worker accepts no new trajectory: report it as retryable."""
    DRAIN = "drain"


def decide(
    phase: TrajectoryPhase,
    command: WorkerCommandT,
    *,
    current_step: int = 0,
    is_draining: bool = False,
) -> Action:
    """The action for ``command`` on a trajectory in ``phase``.

    ``current_step`` is the step in progress (GENERATING, IN_TOOL) or the next one (READY).
    ValueError for a phase outside ``WORKER_PHASES`` (no worker table reports it).
    """
    if phase not in WORKER_PHASES:
        raise ValueError(f"not a phase of a worker's trajectory: {phase.name}")
    match command:
        case Drain():
            return Action.DRAIN
        case StartTrajectory() | MigrateIn():
            return _decide_placement(phase, command, is_draining)
        case ContinueTrajectory():
            return _decide_continue(phase, command.step, current_step)
        case Reprioritize():
            return _on_hosted(phase, generating=Action.SET_PRIORITY, waiting=Action.STORE_PRIORITY)
        case Preempt():
            return _on_hosted(phase, generating=Action.PREEMPT, waiting=Action.IGNORE)
        case MigrateOut():
            return _on_hosted(phase, generating=Action.MIGRATE_AT_GAP, waiting=Action.MIGRATE_NOW)
        case Abort():
            return _on_hosted(phase, generating=Action.ABORT, waiting=Action.ABORT)
    raise TypeError(f"not a worker command: {type(command).__name__}")


def _decide_placement(
    phase: TrajectoryPhase, command: StartTrajectory | MigrateIn, is_draining: bool
) -> Action:
    is_resume = isinstance(command, MigrateIn) or command.resume
    if phase is TrajectoryPhase.ABSENT or (phase is TrajectoryPhase.HANDED_OVER and is_resume):
        if is_draining:
            return Action.REFUSE
        # A plain start still rebuilds when the stream may hold progress (see the agent).
        return Action.RESUME if is_resume else Action.START
    return Action.IGNORE


def _decide_continue(phase: TrajectoryPhase, step: int, current_step: int) -> Action:
    match phase:
        case TrajectoryPhase.ABSENT:
            return Action.RESUME
        case TrajectoryPhase.HANDED_OVER:
            return Action.FORWARD
        case TrajectoryPhase.IN_TOOL if step == current_step + 1:
            return Action.RUN_NEXT
    return Action.IGNORE


def _on_hosted(phase: TrajectoryPhase, *, generating: Action, waiting: Action) -> Action:
    match phase:
        case TrajectoryPhase.ABSENT:
            return Action.RESUME
        case TrajectoryPhase.HANDED_OVER:
            return Action.FORWARD
        case TrajectoryPhase.GENERATING:
            return generating
        case TrajectoryPhase.READY | TrajectoryPhase.IN_TOOL:
            return waiting
    return Action.IGNORE
