"""Carrying out commands: the worker's one dispatcher. ``handle`` reads the state, asks the pure
``decisions.decide``, and carries out every action of the decision (``_act``: one case per
``Action``; an action it has no case for is an error, never a silent no-op); the worker-wide
ones go to the agent (``WorkerSide``).

``handle`` returns once the command's effects are stored, so the caller may acknowledge it: for a
command that runs steps that is when the trajectory next rests (waits for a tool, ends, or
leaves). Transitions of one trajectory happen under its lock; its steps run as a task outside
the lock, so a ``Reprioritize`` or ``Preempt`` reaches a generation while it runs (``segments``).

A trajectory is hosted under the hosting number its placing command gives (``StartTrajectory``,
``MigrateIn``: ``epoch``), written into every event published for it. A placing command of a
hosting the stream has superseded is stale and dropped; a ``Fence`` (the control plane refused an
event of a hosting that is over) makes the worker drop the trajectory if it holds it under that
hosting or an older one: its step is cancelled, nothing more is published for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

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
    WorkerCommandT,
)
from heddle.workers.agent.decisions import (
    TRAJECTORY_COMMANDS,
    Action,
    CommandDecision,
    Mode,
    State,
    TrajectoryCommand,
    decide,
)
from heddle.workers.agent.errors import CommandRefused
from heddle.workers.agent.migration import Migrator
from heddle.workers.agent.publisher import DurablePublisher
from heddle.workers.agent.resume import ResumeKind, ResumePlan, Resumer
from heddle.workers.agent.segments import Segments
from heddle.workers.agent.steps import StepRunner
from heddle.workers.agent.table import (
    CommandArrival,
    HostedTrajectory,
    TrajectoryTable,
)
from heddle.workers.agent.trajectory_log import TrajectoryLog
from heddle.workers.engines.base import Engine, EngineError
from heddle.workers.environments import create_environment

logger = logging.getLogger(__name__)

_PLACING = (StartTrajectory, MigrateIn)
_AT_REST = (ContinueTrajectory, *_PLACING)
"""Commands decided on a trajectory at rest (``handle`` waits for its segment to end)."""


class WorkerSide(Protocol):
    """The worker-wide actions and what their decisions read (``agent.WorkerAgent``)."""

    @property
    def incarnation(self) -> str: ...

    @property
    def weight_version(self) -> int: ...

    async def drain(self, command: Drain) -> None: ...

    def undrain(self) -> None: ...

    async def load_weights(self, command: LoadWeights, *, is_new: bool) -> None: ...

    async def rejoin(self, command: Rejoin) -> None: ...

    async def retire(self, command: Retire) -> None: ...

    async def reshard(self, command: Reshard) -> None: ...


class CommandHandler:
    def __init__(
        self,
        *,
        worker_id: str,
        engine: Engine,
        table: TrajectoryTable,
        runner: StepRunner,
        migrator: Migrator,
        resumer: Resumer,
        publisher: DurablePublisher,
        worker: WorkerSide,
        on_engine_failure: Callable[[EngineError], Awaitable[None]],
    ) -> None:
        self.worker_id = worker_id
        self.engine = engine
        self.table = table
        self.runner = runner
        self.migrator = migrator
        self.resumer = resumer
        self.publisher = publisher
        self.worker = worker
        self.on_engine_failure = on_engine_failure
        self.mode = Mode.SERVING
        self.segments = Segments(
            table=table, runner=runner, migrator=migrator, on_engine_failure=on_engine_failure
        )

    async def handle(
        self,
        command: WorkerCommandT,
        *,
        is_redelivered: bool = False,
        arrival: CommandArrival | None = None,
    ) -> None:
        """Carry out ``command``; returns once its effects are stored. ``arrival``: when it
        was stored and taken (the segment it starts stamps it on its first step)."""
        if not isinstance(command, TRAJECTORY_COMMANDS):
            state = State(
                self.mode,
                incarnation=self.worker.incarnation,
                weight_version=self.worker.weight_version,
            )
            await self._carry_out(decide(state, command), command, None)
            return
        key = (command.rollout_id, command.traj_id)
        hosted = self.table.get(*key)
        if hosted is not None and isinstance(command, _AT_REST):
            await hosted.settled.wait()  # decide on a trajectory at rest (see table.phase)
        if arrival is not None and isinstance(command, _AT_REST):
            self.segments.arrivals[key] = arrival
        try:
            async with self.table.lock_for(*key):
                hosted, state = self.table.state_of(*key, self.mode, is_redelivered=is_redelivered)
                settled = await self._carry_out(decide(state, command), command, hosted)
        except EngineError as exc:
            await self.on_engine_failure(exc)
            return
        finally:
            self.segments.arrivals.pop(key, None)
        if settled is not None:
            await settled.wait()
        self.table.compact(*key)
        self.segments.changed.set()

    async def _carry_out(
        self, decision: CommandDecision, command: WorkerCommandT, hosted: HostedTrajectory | None
    ) -> asyncio.Event | None:
        """Take the decision's mode and carry out every action in order; the event to wait for
        before the command may be acknowledged (a segment's end), if one is."""
        self.mode = decision.mode
        settled: asyncio.Event | None = None
        for action in decision.actions:
            settled = await self._act(action, command, hosted) or settled
        return settled

    async def _act(
        self, action: Action, command: WorkerCommandT, hosted: HostedTrajectory | None
    ) -> asyncio.Event | None:
        if not isinstance(command, TRAJECTORY_COMMANDS):
            await self._act_for_worker(action, command)
            return None
        match action:
            case Action.IGNORE:
                await self._discard(command)
            case Action.START:
                assert isinstance(command, StartTrajectory)
                return await self._start(command)
            case Action.RESUME:
                return await self._resume_then_act(command)
            case Action.REFUSE:
                await self.runner.events.fail_unhosted(
                    command, "worker is draining", retryable=True
                )
            case Action.FORWARD:
                await self.runner.events.forward(
                    command, self.table.handed_to(command.rollout_id, command.traj_id)
                )
            case _:
                assert hosted is not None, f"{action} on a trajectory without a row"
                return await self._act_on_row(action, command, hosted)
        return None

    async def _act_on_row(
        self, action: Action, command: TrajectoryCommand, hosted: HostedTrajectory
    ) -> asyncio.Event | None:
        match action, command:
            case Action.RUN_NEXT, ContinueTrajectory():
                return self.segments.run_next(hosted, command)
            case Action.STORE_PRIORITY, Reprioritize():
                hosted.priority = command.priority
            case Action.SET_PRIORITY, Reprioritize():
                if hosted.request_id is not None:
                    await self.engine.set_priority(hosted.request_id, command.priority)
            case Action.PREEMPT, Preempt():
                await self.segments.preempt(hosted, command)
            case Action.MIGRATE_NOW, MigrateOut():
                await self.segments.migrate(hosted, command)
            case Action.MIGRATE_AT_GAP, MigrateOut():
                hosted.pending_migration = command
                return hosted.settled
            case Action.ABORT, Abort():
                await self.segments.abort(hosted, command.reason)
            case Action.DROP, Fence():
                await self._fence(hosted, command)
            case _:
                raise AssertionError(f"{action} is not an action on {type(command).__name__}")
        return None

    async def _act_for_worker(self, action: Action, command: WorkerCommandT) -> None:
        match action, command:
            case Action.IGNORE, _:
                pass
            case Action.DRAIN, Drain():
                await self.worker.drain(command)
            case Action.UNDRAIN, _:
                self.worker.undrain()
            case Action.LOAD_WEIGHTS | Action.REPORT_WEIGHTS, LoadWeights():
                await self.worker.load_weights(command, is_new=action is Action.LOAD_WEIGHTS)
            case Action.REJOIN, Rejoin():
                await self.worker.rejoin(command)
            case Action.RETIRE, Retire():
                await self.worker.retire(command)
            case Action.RESHARD, Reshard():
                await self.worker.reshard(command)
            case _:
                raise AssertionError(f"{action} is not an action on {type(command).__name__}")

    # ---- starting and resuming ----------------------------------------------------------------

    async def _start(self, command: StartTrajectory) -> asyncio.Event | None:
        try:
            env = create_environment(command.spec.environment)
        except ValueError as exc:
            await self.runner.events.fail_unhosted(command, str(exc))
            return None
        log = TrajectoryLog(
            rollout_id=command.rollout_id, traj_id=command.traj_id, spec=command.spec
        )
        log.host(self.worker_id, command.epoch)
        hosted = HostedTrajectory(log=log, spec=command.spec, env=env, priority=command.priority)
        self.table.put(hosted)
        self.segments.start(hosted, is_new=True)
        return hosted.settled

    async def _resume_then_act(self, command: TrajectoryCommand) -> asyncio.Event | None:
        plan = await self._plan(command)
        match plan.kind:
            case ResumeKind.FOREIGN if isinstance(command, _PLACING):
                await self._discard(command)  # stale: the trajectory was placed elsewhere since
                return None
            case ResumeKind.FOREIGN:
                self.table.bury(command.rollout_id, command.traj_id, handed_to=plan.owner)
                await self.runner.events.forward(command, plan.owner)
                return None
            case ResumeKind.UNKNOWN:
                raise CommandRefused(
                    f"unknown trajectory {command.rollout_id}/{command.traj_id}: "
                    "no spec in the stream"
                )
            case ResumeKind.FINISHED:
                self.table.bury(command.rollout_id, command.traj_id)
                await self._discard(command)
                return None
        hosted = plan.hosted
        assert hosted is not None
        self.table.put(hosted)
        if plan.kind is ResumeKind.RUN:
            self.segments.start(hosted, outcome=plan.outcome)
        elif plan.outcome is not None and plan.outcome.tool_request is not None:
            await self.runner.events.resend_tool_call(hosted, plan.outcome.tool_request)
        _, state = self.table.state_of(command.rollout_id, command.traj_id, self.mode)
        settled = await self._carry_out(decide(state, command), command, hosted)
        return settled or (hosted.settled if hosted.is_running else None)

    async def _plan(self, command: TrajectoryCommand) -> ResumePlan:
        try:
            return await self.resumer.resume(
                command.rollout_id,
                command.traj_id,
                spec=command.spec if isinstance(command, _PLACING) else None,
                priority=_priority_of(command),
                cache_key=command.cache_key if isinstance(command, _PLACING) else "",
                epoch=command.epoch if isinstance(command, _PLACING) else None,
            )
        except (ValueError, RuntimeError) as exc:
            if isinstance(exc, EngineError):
                raise
            await self.runner.events.fail_unhosted(command, f"cannot resume: {exc}")
            return ResumePlan(ResumeKind.FINISHED)

    # ---- other actions ------------------------------------------------------------------------

    async def _fence(self, hosted: HostedTrajectory, command: Fence) -> None:
        """Drop the trajectory: this worker holds it under the fenced hosting or an older one
        (``decide`` leaves a newer hosting of it here alone)."""
        logger.warning(
            "worker %s drops %s/%s: hosting %d is over (%s)",
            self.worker_id, command.rollout_id, command.traj_id, command.epoch, command.reason,
        )  # fmt: skip
        await self.segments.drop(hosted)

    async def _discard(self, command: TrajectoryCommand) -> None:
        """Nothing to do; a KV blob a discarded ``MigrateIn`` carried is deleted, not leaked."""
        if isinstance(command, MigrateIn) and command.cache_key:
            await self.resumer.discard_blob(command.cache_key)


def _priority_of(command: TrajectoryCommand) -> float:
    match command:
        case StartTrajectory() | ContinueTrajectory() | MigrateIn() | Reprioritize():
            return command.priority
    return 0.0
