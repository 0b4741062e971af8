"""A trajectory's events as a worker publishes them: each folded into the trajectory's log
once stored (``emit``, ``emit_many``: the log always equals what the stream holds), its tool
calls (``call_tool``: the step's result and ``ToolCalled`` stored before the call is sent), and
its endings (``complete``, ``fail``: the engine forgets the trajectory after either); and for a
trajectory this worker does not host, a command forwarded to its holder (``forward``) or a
failure (``fail_unhosted``).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from heddle.events import (
    EventT,
    Generated,
    MigrateIn,
    StartTrajectory,
    TerminalReason,
    ToolCall,
    ToolRequest,
    TraceTool,
    TrajectoryEvent,
    TrajectoryPhase,
)
from heddle.ids import derive_id
from heddle.workers.agent import records
from heddle.workers.agent.decisions import TrajectoryCommand
from heddle.workers.agent.errors import StepError
from heddle.workers.agent.generation import engine_key
from heddle.workers.agent.publisher import DurablePublisher
from heddle.workers.agent.table import RELEASED, HostedTrajectory
from heddle.workers.agent.trajectory_log import TrajectoryLog
from heddle.workers.engines.base import Engine


class TrajectoryEvents:
    def __init__(
        self,
        *,
        worker_id: str,
        engine: Engine,
        publisher: DurablePublisher,
        tool_timeout_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.worker_id = worker_id
        self.engine = engine
        self.publisher = publisher
        self.tool_timeout_s = tool_timeout_s
        self.time_scale = engine.capabilities.time_scale
        self.clock = clock

    async def call_tool(
        self, hosted: HostedTrajectory, request: ToolRequest, generated: Generated | None
    ) -> None:
        """Publish the step's result (when pending) and its ``ToolCalled`` together, then the
        call. ``ToolCalled`` is stored before the call is sent, so that it precedes the
        executor's ``ToolReturned`` in the stream. A crash between the two leaves the
        trajectory IN_TOOL without its call: resuming sends the call (same id) again, see
        resume.py."""
        log = hosted.log
        expected = (
            TrajectoryPhase.GENERATING if generated is not None else TrajectoryPhase.GENERATED
        )
        if log.phase is not expected:
            raise StepError("the environment asked for a second tool call without a generation")
        call = self._tool_call(hosted, request)
        called = records.tool_called(log, call, worker_id=self.worker_id, now=self.clock())
        await self.emit_many(hosted, [called] if generated is None else [generated, called])
        await self.publisher.publish(call)

    async def resend_tool_call(self, hosted: HostedTrajectory, request: ToolRequest) -> None:
        """Publish the pending tool call again, under the id of the ``ToolCalled`` the stream
        holds (whichever hosting made it): dropped if the stream still has it, answered under
        that id otherwise."""
        called = hosted.log.steps[-1].tool_called if hosted.log.steps else None
        call_id = called.call_id if called is not None else ""
        await self.publisher.publish(self._tool_call(hosted, request, call_id))

    def _tool_call(
        self, hosted: HostedTrajectory, request: ToolRequest, call_id: str = ""
    ) -> ToolCall:
        timeout_s = self.tool_timeout_s
        if isinstance(request, TraceTool):
            # A replayed call lasts its recorded time (scaled): never time it out before.
            timeout_s = max(timeout_s, 2.0 * request.duration_s / self.time_scale + 1.0)
        return records.tool_call(
            hosted.log,
            step=hosted.log.current_step,
            request=request,
            pool=hosted.spec.tool_pool,
            timeout_s=timeout_s,
            time_scale=self.time_scale,
            now=self.clock(),
            call_id=call_id,
        )

    async def complete(
        self, hosted: HostedTrajectory, *, reward: float, finish_reason: TerminalReason
    ) -> None:
        event = records.completed(
            hosted.log,
            worker_id=self.worker_id,
            reward=reward,
            finish_reason=finish_reason,
            time_scale=self.time_scale,
            now=self.clock(),
        )
        await self.emit(hosted, event)
        await self.engine.release(engine_key(hosted.rollout_id, hosted.traj_id))

    async def fail(
        self,
        hosted: HostedTrajectory,
        reason: str,
        *,
        retryable: bool = False,
        finish_reason: TerminalReason = "error",
    ) -> None:
        event = records.failed(
            hosted.log,
            reason=reason,
            worker_id=self.worker_id,
            now=self.clock(),
            retryable=retryable,
            discriminator=self.worker_id if retryable else "",
            finish_reason=finish_reason,
        )
        await self.emit(hosted, event)
        # A retryable failure hands the trajectory back to the control plane, which re-places
        # it (possibly here again: the released row then counts as absent).
        if retryable:
            hosted.stage = RELEASED
        await self.engine.release(engine_key(hosted.rollout_id, hosted.traj_id))

    async def emit(self, hosted: HostedTrajectory, event: EventT) -> None:
        """Publish one of the trajectory's events and fold it into its log once stored."""
        assert isinstance(event, TrajectoryEvent)
        await self.publisher.publish(event)
        hosted.log.apply(event)

    async def emit_many(self, hosted: HostedTrajectory, events: list[EventT]) -> None:
        """Publish events of the trajectory in one round trip (in order), then fold them."""
        await self.publisher.publish_many(events)
        for event in events:
            hosted.log.apply(event)

    async def forward(self, command: TrajectoryCommand, target_worker_id: str) -> None:
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

    async def fail_unhosted(
        self, command: TrajectoryCommand, reason: str, *, retryable: bool = False
    ) -> None:
        """Report a trajectory command this worker cannot take as the trajectory's failure."""
        placing = command if isinstance(command, (StartTrajectory, MigrateIn)) else None
        spec = placing.spec if placing is not None else None
        log = TrajectoryLog(rollout_id=command.rollout_id, traj_id=command.traj_id, spec=spec)
        if placing is not None:
            log.host(self.worker_id, placing.epoch)
        event = records.failed(
            log,
            reason=reason,
            worker_id=self.worker_id,
            now=self.clock(),
            retryable=retryable,
            discriminator=derive_id(self.worker_id, command.command_id),
        )
        await self.publisher.publish(event)
