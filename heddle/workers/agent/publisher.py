"""Publishing that survives a lost connection: retry with the same id until stored.

Every message the worker publishes has a deterministic id, so retrying after a timeout or a
reconnect is safe (JetStream answers "duplicate" for one already stored). While the connection is
down the caller simply waits here: the trajectory's step is paused, not lost, and the command
that caused it stays unacknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from heddle.events import Event, ToolCall, WorkerCommand, WorkerTelemetry
from heddle.workers.agent.ports import MessageSink

logger = logging.getLogger(__name__)

_FIRST_RETRY_S = 0.05


def is_transient(error: BaseException) -> bool:
    """Errors worth retrying: timeouts and connection trouble (nats errors subclass these or
    carry these words); anything else is a bug or a refused message and is raised."""
    if isinstance(error, (TimeoutError, ConnectionError, OSError)):
        return True
    text = f"{type(error).__name__} {error}".lower()
    return any(word in text for word in ("timeout", "connection", "no responders", "reconnect"))


class DurablePublisher:
    def __init__(
        self,
        sink: MessageSink,
        *,
        max_retry_s: float = 2.0,
        transient: Callable[[BaseException], bool] = is_transient,
    ) -> None:
        self._sink = sink
        self._max_retry_s = max_retry_s
        self._transient = transient
        self.num_retries = 0

    async def publish(self, message: Event | WorkerCommand | ToolCall) -> None:
        """Return once ``message`` is stored; retries transient failures forever (cancel to
        give up), raises anything else."""
        delay_s = _FIRST_RETRY_S
        while True:
            try:
                await self._sink.publish(message)
                return
            except Exception as exc:
                if not self._transient(exc):
                    raise
                self.num_retries += 1
                if delay_s == _FIRST_RETRY_S:
                    logger.warning("publish paused (%s); retrying with the same id", exc)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, self._max_retry_s)

    async def publish_telemetry(self, telemetry: WorkerTelemetry) -> None:
        """Best effort: telemetry lost during an outage is simply not sent."""
        try:
            await self._sink.publish_telemetry(telemetry)
        except Exception as exc:
            if not self._transient(exc):
                raise
