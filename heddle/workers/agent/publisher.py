"""Publishing that survives a lost connection: retry with the same id until stored.

This is the worker's one retry policy on publish: what is worth retrying is
``heddle.bus.transient.is_transient`` (by exception type and error code), and the bus under a
live agent makes one attempt per call (``heddle.workers.agent.transport.AGENT_PUBLISH``), so no
second loop runs beneath this one.

Every message the worker publishes has a deterministic id, so retrying after a timeout or a
reconnect is safe (JetStream answers "duplicate" for one already stored). While the connection is
down the caller simply waits here: the trajectory's step is paused, not lost, and the command
that caused it stays unacknowledged. Once the worker closes (SIGTERM), a publish that fails
gives up instead (``WorkerStopping``): its command goes back to the next incarnation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from heddle.bus.transient import is_transient
from heddle.events import Event, ToolCall, WorkerCommand, WorkerHeartbeat, WorkerTelemetry
from heddle.workers.agent.errors import WorkerStopping
from heddle.workers.agent.ports import BatchSink, MessageSink

logger = logging.getLogger(__name__)

_FIRST_RETRY_S = 0.05


class DurablePublisher:
    def __init__(self, sink: MessageSink, *, max_retry_s: float = 2.0) -> None:
        self._sink = sink
        self._batch_sink = sink if isinstance(sink, BatchSink) else None
        self._max_retry_s = max_retry_s
        self._closing = asyncio.Event()
        self._sending: set[asyncio.Task[object]] = set()
        """Tasks with an attempt in flight (a bus publish may wait up to its retry deadline)."""
        self._cancelled: set[asyncio.Task[object]] = set()
        """Those ``close`` cancelled."""
        self.num_retries = 0

    def close(self) -> None:
        """Stop retrying: a publish waiting to try again, or whose attempt is in flight or
        fails from now on, raises ``WorkerStopping`` (its effects are left to the next
        incarnation, which publishes them with the same ids)."""
        self._closing.set()
        for task in self._sending:
            if not task.cancelling():  # a step cancelled by its owner stays cancelled
                task.cancel()
                self._cancelled.add(task)

    async def publish(self, message: Event | WorkerCommand | ToolCall) -> None:
        """Return once ``message`` is stored; retries transient failures forever (cancel to
        give up), raises anything else."""
        await self._retrying(lambda: self._sink.publish(message))

    async def publish_many(self, messages: Sequence[Event | WorkerCommand | ToolCall]) -> None:
        """Return once every message is stored, in one round trip when the sink can pipeline
        (``BatchSink``: sent in order, acknowledgements awaited together); else one by one.
        Retries like ``publish`` (the same ids: what was stored is not stored twice)."""
        batch_sink = self._batch_sink
        if batch_sink is None:
            for message in messages:
                await self.publish(message)
            return
        await self._retrying(lambda: batch_sink.publish_many(messages))

    async def _retrying(self, send: Callable[[], Awaitable[None]]) -> None:
        delay_s = _FIRST_RETRY_S
        task = asyncio.current_task()
        while True:
            try:
                await self._attempt(send, task)
                return
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if self._closing.is_set():
                    raise WorkerStopping(f"closing: a publish gave up ({exc})") from exc
                self.num_retries += 1
                if delay_s == _FIRST_RETRY_S:
                    logger.warning("publish paused (%s); retrying with the same ids", exc)
                await self._pause(delay_s)
                delay_s = min(delay_s * 2, self._max_retry_s)

    async def _attempt(
        self, send: Callable[[], Awaitable[None]], task: asyncio.Task[object] | None
    ) -> None:
        if task is None:
            await send()
            return
        self._sending.add(task)
        try:
            await send()
        except asyncio.CancelledError:
            if task not in self._cancelled:
                raise
            self._cancelled.discard(task)
            task.uncancel()  # cancelled by ``close``: the caller learns why instead
            raise WorkerStopping("closing: a publish in flight gave up") from None
        finally:
            self._sending.discard(task)

    async def _pause(self, delay_s: float) -> None:
        """Sleep ``delay_s``, or less: until the worker closes."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), delay_s)

    async def publish_telemetry(self, telemetry: WorkerTelemetry | WorkerHeartbeat) -> None:
        """Best effort: telemetry lost during an outage is simply not sent."""
        try:
            await self._sink.publish_telemetry(telemetry)
        except Exception as exc:
            if not is_transient(exc):
                raise
