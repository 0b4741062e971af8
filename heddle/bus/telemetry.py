"""Best-effort worker telemetry on core NATS, not persisted: load reports on
``heddle.telemetry.worker.<id>`` and heartbeats on ``heddle.telemetry.heartbeat.<id>``.

Heartbeats left the event stream: stored, an idle deployment appended one event per worker and
period forever (every replay, verify and new projector read them), while liveness only needs
the latest one of each live worker. Core NATS delivers a heartbeat to whoever listens now (the
control plane) and keeps nothing; a control plane that starts counts every worker as heard from
at its start (``WorkerLiveness.start_listening``), so a restart never fails a live worker.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from heddle.events import (
    DecodeError,
    WorkerHeartbeat,
    WorkerTelemetry,
    decode_event,
    decode_telemetry,
    encode,
)
from heddle.events.subjects import (
    HEARTBEATS_SUBJECT,
    TELEMETRY_PREFIX,
    heartbeat_subject,
    telemetry_subject,
)

log = logging.getLogger(__name__)

TelemetryHandler = Callable[[WorkerTelemetry], Awaitable[None]]
HeartbeatHandler = Callable[[WorkerHeartbeat], None]


async def publish_telemetry(client: Client, telemetry: WorkerTelemetry | WorkerHeartbeat) -> None:
    """Fire and forget: nobody listening, or a lost connection, drops the report."""
    if isinstance(telemetry, WorkerHeartbeat):
        await client.publish(heartbeat_subject(telemetry.worker_id), encode(telemetry))
    else:
        await client.publish(telemetry_subject(telemetry.worker_id), encode(telemetry))


async def subscribe_heartbeats(client: Client, handler: HeartbeatHandler) -> Subscription:
    """Call ``handler`` with every worker's heartbeats (undecodable ones are logged, dropped)."""

    async def receive(msg: Msg) -> None:
        try:
            heartbeat = decode_event(msg.data)
        except DecodeError as exc:
            log.debug("dropped heartbeat on %s: %s", msg.subject, exc)
            return
        if isinstance(heartbeat, WorkerHeartbeat):
            handler(heartbeat)

    return await client.subscribe(HEARTBEATS_SUBJECT, cb=receive)


class TelemetrySubscription:
    """Calls a handler for each report; undecodable reports are logged and dropped."""

    def __init__(self, handler: TelemetryHandler) -> None:
        self._handler = handler
        self._subscription: Subscription | None = None
        self.num_dropped = 0

    async def open(self, client: Client, worker_id: str = "*") -> TelemetrySubscription:
        subject = (
            f"{TELEMETRY_PREFIX}.worker.*" if worker_id == "*" else telemetry_subject(worker_id)
        )
        self._subscription = await client.subscribe(subject, cb=self._receive)
        return self

    async def close(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            await subscription.unsubscribe()

    async def _receive(self, msg: Msg) -> None:
        try:
            telemetry = decode_telemetry(msg.data)
        except ValueError as exc:
            self.num_dropped += 1
            log.debug("dropped telemetry on %s: %s", msg.subject, exc)
            return
        await self._handler(telemetry)
