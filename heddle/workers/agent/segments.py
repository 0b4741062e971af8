"""A trajectory's *segments*: its steps run as a task outside its lock, so a ``Reprioritize`` or
``Preempt`` reaches a generation while it runs; when the steps rest (a tool call, the end, a
failure) a migration asked meanwhile is carried out under the lock, and the trajectory is
*settled* (``hosted.settled`` set, ``changed`` set). An engine failure goes to
``on_engine_failure``; while ``is_closing`` no segment starts (``WorkerStopping``). What stops a
segment from outside is here too: a preemption (of its generation), an abort, a drop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from heddle.events import ContinueTrajectory, MigrateOut, Preempt, ToolReturned, TrajectoryPhase
from heddle.workers.agent import records
from heddle.workers.agent.errors import WorkerStopping
from heddle.workers.agent.generation import engine_key
from heddle.workers.agent.migration import Migrator
from heddle.workers.agent.steps import StepRunner
from heddle.workers.agent.table import (
    RELEASED,
    RESTING,
    CommandArrival,
    HostedTrajectory,
    Running,
    TrajectoryTable,
)
from heddle.workers.engines.base import EngineError
from heddle.workers.environments import StepOutcome

logger = logging.getLogger(__name__)


class Segments:
    def __init__(
        self,
        *,
        table: TrajectoryTable,
        runner: StepRunner,
        migrator: Migrator,
        on_engine_failure: Callable[[EngineError], Awaitable[None]],
    ) -> None:
        self.table = table
        self.runner = runner
        self.migrator = migrator
        self.on_engine_failure = on_engine_failure
        self.is_closing = False
        """Shutting down: no new step starts (``WorkerStopping``)."""
        self.changed = asyncio.Event()
        """Set whenever a trajectory comes to rest (a drain waits on it)."""
        self.arrivals: dict[tuple[str, str], CommandArrival] = {}
        """Arrival of the command being handled, per trajectory, until a segment takes it."""
        self.tasks: set[asyncio.Task[None]] = set()
        """Segments not yet ended (``close`` cancels them)."""

    def run_next(self, hosted: HostedTrajectory, command: ContinueTrajectory) -> asyncio.Event:
        result: ToolReturned = command.tool_result
        hosted.log.apply(result)
        hosted.priority = command.priority
        self.start(hosted, tool_result=result)
        return hosted.settled

    def start(
        self,
        hosted: HostedTrajectory,
        *,
        outcome: StepOutcome | None = None,
        tool_result: ToolReturned | None = None,
        is_new: bool = False,
    ) -> None:
        if self.is_closing:
            raise WorkerStopping("shutting down: the step is left to the next incarnation")
        arrival = self.arrivals.pop((hosted.rollout_id, hosted.traj_id), None)
        hosted.settled.clear()
        segment = asyncio.create_task(
            self._segment(hosted, outcome, tool_result, is_new, arrival),
            name=f"segment-{hosted.traj_id}",
        )
        hosted.stage = Running(segment)
        self.tasks.add(segment)
        segment.add_done_callback(self.tasks.discard)

    async def _segment(
        self,
        hosted: HostedTrajectory,
        outcome: StepOutcome | None,
        tool_result: ToolReturned | None,
        is_new: bool,
        arrival: CommandArrival | None,
    ) -> None:
        try:
            await self.runner.run_segment(
                hosted, outcome, tool_result=tool_result, is_new=is_new, arrival=arrival
            )
        except asyncio.CancelledError:
            self._settle(hosted)
            raise
        except EngineError as exc:
            self._settle(hosted)
            await self.on_engine_failure(exc)
            return
        try:
            async with self.table.lock_for(hosted.rollout_id, hosted.traj_id):
                if hosted.is_running:
                    hosted.stage = RESTING
                migration, hosted.pending_migration = hosted.pending_migration, None
                if migration is not None and hosted.phase is TrajectoryPhase.IN_TOOL:
                    await self.migrate(hosted, migration)
        finally:
            self._settle(hosted)  # even when cancelled while waiting for the lock
        self.table.compact(hosted.rollout_id, hosted.traj_id)

    async def migrate(self, hosted: HostedTrajectory, command: MigrateOut) -> None:
        """Migrate; a failure other than the engine's leaves the trajectory here (the control
        plane sees no ``Migrated`` and may ask again)."""
        try:
            await self.migrator.migrate_out(hosted, command)
        except EngineError as exc:
            await self.on_engine_failure(exc)
        except Exception:
            logger.exception("migration %s of %s failed", command.migration_id, hosted.traj_id)

    def _settle(self, hosted: HostedTrajectory) -> None:
        hosted.settle()
        self.changed.set()

    async def preempt(self, hosted: HostedTrajectory, command: Preempt) -> None:
        """Preempt the running generation (its KV kept where the engine can) and record it."""
        if hosted.request_id is None:
            return
        runner = self.runner
        await runner.engine.preempt(hosted.request_id)
        event = records.preempted(
            hosted.log,
            worker_id=runner.worker_id,
            by_traj_id=command.by_traj_id,
            command_id=command.command_id,
            now=runner.clock(),
        )
        await runner.events.emit(hosted, event)

    async def abort(self, hosted: HostedTrajectory, reason: str) -> None:
        await _cancel(hosted)
        await self.runner.events.fail(
            hosted, f"aborted: {reason}" if reason else "aborted", finish_reason="aborted"
        )

    async def drop(self, hosted: HostedTrajectory) -> None:
        """Stop working on ``hosted`` without publishing anything more for it: its step is
        cancelled, its engine state released, its row given up (a later command rebuilds it
        from the stream, which names its holder now)."""
        await _cancel(hosted)
        hosted.pending_migration = None
        hosted.stage = RELEASED
        await self.runner.engine.release(engine_key(hosted.rollout_id, hosted.traj_id))


async def _cancel(hosted: HostedTrajectory) -> None:
    """Cancel the trajectory's running segment, if one runs, and wait for its end."""
    if isinstance(hosted.stage, Running) and not hosted.stage.segment.done():
        segment = hosted.stage.segment
        segment.cancel()
        await asyncio.wait([segment])
