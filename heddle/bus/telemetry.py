"""Best-effort worker telemetry on core NATS (``heddle.telemetry.worker.<id>``, not persisted)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from heddle.events import WorkerTelemetry, decode_telemetry, encode
from heddle.events.subjects import TELEMETRY_PREFIX, telemetry_subject

log = logging.getLogger(__name__)

TelemetryHandler = Callable[[WorkerTelemetry], Awaitable[None]]


async def publish_telemetry(client: Client, telemetry: WorkerTelemetry) -> None:
    """Fire and forget: nobody listening, or a lost connection, drops the report."""
    await client.publish(telemetry_subject(telemetry.worker_id), encode(telemetry))


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
