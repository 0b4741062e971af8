"""Carrying out trajectory commands: decide on the phase (``decisions``), then act.

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

import msgspec

from heddle.events import (
    Abort,
    ContinueTrajectory,
    Fence,
    MigrateIn,
    MigrateOut,
    Preempt,
    Reprioritize,
    StartTrajectory,
)
from heddle.ids import derive_id
from heddle.workers.agent import records
from heddle.workers.agent.decisions import Action, decide
from heddle.workers.agent.errors import CommandRefused
from heddle.workers.agent.generation import engine_key
from heddle.workers.agent.history import TrajectoryLog
from heddle.workers.agent.migration import Migrator
from heddle.workers.agent.publisher import DurablePublisher
from heddle.workers.agent.resume import ResumeKind, ResumePlan, Resumer
from heddle.workers.agent.segments import Segments
from heddle.workers.agent.steps import StepRunner
from heddle.workers.agent.table import CommandArrival, HostedTrajectory, TrajectoryTable
from heddle.workers.engines.base import Engine, EngineError
from heddle.workers.environments import create_environment

logger = logging.getLogger(__name__)

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
_PLACING = (StartTrajectory, MigrateIn)


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
        on_engine_failure: Callable[[EngineError], Awaitable[None]],
    ) -> None:
        self.worker_id = worker_id
        self.engine = engine
        self.table = table
        self.runner = runner
        self.migrator = migrator
        self.resumer = resumer
        self.publisher = publisher
        self.on_engine_failure = on_engine_failure
        self.is_draining = False
        self.segments = Segments(
            table=table, runner=runner, migrator=migrator, on_engine_failure=on_engine_failure
        )

    async def handle(
        self,
        command: TrajectoryCommand,
        *,
        is_redelivered: bool = False,
        arrival: CommandArrival | None = None,
    ) -> None:
        """Carry out ``command``; returns once its effects are stored. ``arrival``: when it
        was stored and taken (the segment it starts stamps it on its first step)."""
        if isinstance(command, Fence):
            await self._fence(command)
            return
        key = (command.rollout_id, command.traj_id)
        hosted = self.table.get(*key)
        if hosted is not None and isinstance(command, (ContinueTrajectory, *_PLACING)):
            await hosted.settled.wait()  # decide on a trajectory at rest (see table.phase)
        if arrival is not None and isinstance(command, (ContinueTrajectory, *_PLACING)):
            self.segments.arrivals[key] = arrival
        try:
            async with self.table.lock_for(command.rollout_id, command.traj_id):
                settled = await self._decide_and_act(command, is_redelivered)
        except EngineError as exc:
            await self.on_engine_failure(exc)
            return
        finally:
            self.segments.arrivals.pop(key, None)
        if settled is not None:
            await settled.wait()
        self.table.compact(command.rollout_id, command.traj_id)
        self.segments.changed.set()

    async def _decide_and_act(
        self, command: TrajectoryCommand, is_redelivered: bool
    ) -> asyncio.Event | None:
        hosted = self.table.get(command.rollout_id, command.traj_id)
        phase = self.table.phase_of(command.rollout_id, command.traj_id)
        step = hosted.log.current_step if hosted is not None else 0
        action = decide(phase, command, current_step=step, is_draining=self.is_draining)
        if action is Action.START and is_redelivered:
            action = Action.RESUME  # an earlier delivery may have run steps: rebuild first
        if action is Action.RESUME:
            return await self._resume_then_act(command)
        if action is Action.START:
            assert isinstance(command, StartTrajectory)
            return await self._start(command)
        if action is Action.REFUSE:
            await self._fail_unhosted(command, "worker is draining", retryable=True)
            return None
        if action is Action.FORWARD:
            await self._forward(command, self.table.handed_to(command.rollout_id, command.traj_id))
            return None
        if action is Action.IGNORE or hosted is None:
            await self._discard(command)
            return None
        return await self._act(action, hosted, command)

    async def _act(
        self, action: Action, hosted: HostedTrajectory, command: TrajectoryCommand
    ) -> asyncio.Event | None:
        match action, command:
            case Action.RUN_NEXT, ContinueTrajectory():
                return self.segments.run_next(hosted, command)
            case Action.SET_PRIORITY | Action.STORE_PRIORITY, Reprioritize():
                hosted.priority = command.priority
                if hosted.request_id is not None:
                    await self.engine.set_priority(hosted.request_id, command.priority)
            case Action.PREEMPT, Preempt():
                await self._preempt(hosted, command)
            case Action.MIGRATE_NOW, MigrateOut():
                await self.segments.migrate(hosted, command)
            case Action.MIGRATE_AT_GAP, MigrateOut():
                hosted.pending_migration = command
                return hosted.settled
            case Action.ABORT, Abort():
                await self._abort(hosted, command.reason)
            case Action.IGNORE, _:
                await self._discard(command)
        return None

    # ---- starting and resuming ----------------------------------------------------------------

    async def _start(self, command: StartTrajectory) -> asyncio.Event | None:
        try:
            env = create_environment(command.spec.environment)
        except ValueError as exc:
            await self._fail_unhosted(command, str(exc))
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
                await self._forward(command, plan.owner)
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
        step = hosted.log.current_step
        action = decide(hosted.phase, command, current_step=step, is_draining=self.is_draining)
        settled = await self._act(action, hosted, command)
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
            await self._fail_unhosted(command, f"cannot resume: {exc}")
            return ResumePlan(ResumeKind.FINISHED)

    # ---- other actions ------------------------------------------------------------------------

    async def _fence(self, command: Fence) -> None:
        """Drop the trajectory if this worker holds it under the fenced hosting or an older one
        (a newer hosting of it here is left alone)."""
        async with self.table.lock_for(command.rollout_id, command.traj_id):
            hosted = self.table.get(command.rollout_id, command.traj_id)
            if hosted is None or hosted.log.epoch > command.epoch:
                return
            logger.warning(
                "worker %s drops %s/%s: hosting %d is over (%s)",
                self.worker_id, command.rollout_id, command.traj_id, command.epoch, command.reason,
            )  # fmt: skip
            await self.drop(hosted)
        self.table.compact(command.rollout_id, command.traj_id)
        self.segments.changed.set()

    async def drop(self, hosted: HostedTrajectory) -> None:
        """Stop working on ``hosted`` without publishing anything more for it: its step is
        cancelled, its engine state released, its row given up (a later command rebuilds it
        from the stream, which names its holder now)."""
        segment = hosted.segment
        if segment is not None and not segment.done():
            segment.cancel()
            await asyncio.wait([segment])
        hosted.pending_migration = None
        hosted.is_released = True
        await self.engine.release(engine_key(hosted.rollout_id, hosted.traj_id))

    async def _preempt(self, hosted: HostedTrajectory, command: Preempt) -> None:
        if hosted.request_id is None:
            return
        await self.engine.preempt(hosted.request_id)
        event = records.preempted(
            hosted.log,
            worker_id=self.worker_id,
            by_traj_id=command.by_traj_id,
            command_id=command.command_id,
            now=self.runner.clock(),
        )
        await self.runner.events.emit(hosted, event)

    async def _abort(self, hosted: HostedTrajectory, reason: str) -> None:
        segment = hosted.segment
        if segment is not None and not segment.done():
            segment.cancel()
            await asyncio.wait([segment])
        await self.runner.events.fail(
            hosted, f"aborted: {reason}" if reason else "aborted", finish_reason="aborted"
        )

    async def _forward(self, command: TrajectoryCommand, target_worker_id: str) -> None:
        """Re-send a command to the worker now holding the trajectory (deterministic id)."""
        if not target_worker_id or target_worker_id == self.worker_id:
            return
        forwarded = msgspec.structs.replace(
            command,
            worker_id=target_worker_id,
            sent_by=self.worker_id,
            command_id=derive_id(command.command_id, "fwd", target_worker_id),
        )
        await self.publisher.publish(forwarded)

    async def _discard(self, command: TrajectoryCommand) -> None:
        """Nothing to do; a KV blob a discarded ``MigrateIn`` carried is deleted, not leaked."""
        if isinstance(command, MigrateIn) and command.cache_key:
            await self.resumer.discard_blob(command.cache_key)

    async def _fail_unhosted(
        self, command: TrajectoryCommand, reason: str, *, retryable: bool = False
    ) -> None:
        spec = command.spec if isinstance(command, _PLACING) else None
        log = TrajectoryLog(rollout_id=command.rollout_id, traj_id=command.traj_id, spec=spec)
        if isinstance(command, _PLACING):
            log.host(self.worker_id, command.epoch)
        event = records.failed(
            log,
            reason=reason,
            worker_id=self.worker_id,
            now=self.runner.clock(),
            retryable=retryable,
            discriminator=derive_id(self.worker_id, command.command_id),
        )
        await self.publisher.publish(event)


def _priority_of(command: TrajectoryCommand) -> float:
    match command:
        case StartTrajectory() | ContinueTrajectory() | MigrateIn() | Reprioritize():
            return command.priority
    return 0.0
