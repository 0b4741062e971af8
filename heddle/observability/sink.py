"""A worker agent's message sink that updates metrics from what the agent publishes.

It wraps the agent's real sink (``heddle.workers.agent.ports.MessageSink``): every event is
observed after it is stored, every telemetry report as it is sent. Wrapping the sink, rather than
instrumenting the agent, keeps the agent free of metrics code and sees exactly what the stream
sees (an event whose publish failed is retried by the agent and counted once, when stored).
"""

from __future__ import annotations

from typing import Protocol

from heddle.events import Event, ToolCall, WorkerCommand, WorkerHeartbeat, WorkerTelemetry
from heddle.observability.metrics import Metrics


class _Sink(Protocol):
    async def publish(self, message: Event | WorkerCommand | ToolCall) -> None: ...

    async def publish_telemetry(self, telemetry: WorkerTelemetry | WorkerHeartbeat) -> None: ...


class MetricsSink:
    """``MessageSink`` that forwards to ``inner`` and feeds ``metrics``."""

    def __init__(self, inner: _Sink, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics

    async def publish(self, message: Event | WorkerCommand | ToolCall) -> None:
        await self.inner.publish(message)
        if isinstance(message, Event):
            self.metrics.observe_published(message)

    async def publish_telemetry(self, telemetry: WorkerTelemetry | WorkerHeartbeat) -> None:
        if isinstance(telemetry, WorkerTelemetry):
            self.metrics.observe_telemetry(telemetry)
        await self.inner.publish_telemetry(telemetry)
