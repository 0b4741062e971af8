"""What the worker agent needs from the outside world, as small protocols.

The live agent gets them from ``heddle.bus`` (``heddle.workers.agent.transport``); unit tests of
the agent's logic may pass in-memory versions. Every method may raise on a lost connection: the
agent retries publishes with the same ids (see ``publisher``) and never acks a command before its
effects are published.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from heddle.events import Event, EventT, ToolCall, WorkerCommand, WorkerHeartbeat, WorkerTelemetry


class MessageSink(Protocol):
    async def publish(self, message: Event | WorkerCommand | ToolCall) -> None:
        """Store ``message`` durably (JetStream), de-duplicated by its event or command id."""
        ...

    async def publish_telemetry(self, telemetry: WorkerTelemetry | WorkerHeartbeat) -> None:
        """Best effort, not persisted (core NATS)."""
        ...


@runtime_checkable
class BatchSink(Protocol):
    """A sink that can pipeline: the agent publishes a step's result and its tool call event
    in one round trip where the sink offers this."""

    async def publish_many(self, messages: Sequence[Event | WorkerCommand | ToolCall]) -> None:
        """Store every message (in order, de-duplicated by id); return when all are stored."""
        ...


class HistorySource(Protocol):
    async def trajectory_events(self, rollout_id: str, traj_id: str) -> list[EventT]:
        """Every stored event of one trajectory, in stream order."""
        ...


class BlobStore(Protocol):
    """Where migrating KV caches travel (the bus object store)."""

    async def put_blob(self, key: str, data: bytes) -> None: ...

    async def get_blob(self, key: str) -> bytes:
        """The blob stored under ``key``; ``KeyError`` when there is none."""
        ...

    async def delete_blob(self, key: str) -> None: ...


@runtime_checkable
class ObjectSource(Protocol):
    """Named objects of any object-store bucket (published weights)."""

    async def get_object(self, bucket: str, name: str) -> bytes:
        """The object's bytes; ``KeyError`` when there is none."""
        ...
