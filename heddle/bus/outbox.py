"""Publishing Heddle's messages: each on its subject, de-duplicated by its id, its largest
arrays offloaded to bucket ``heddle-payloads`` when it is over ``max_event_bytes``
(``heddle.bus.payloads``), and read back on the consuming side (``resolve``).

``Outbox`` is what a started ``Bus`` publishes through; it owns no connection (the bus opens
and closes the publisher and the payload store).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from heddle.bus import state
from heddle.bus.objects import PAYLOADS_BUCKET, Objects
from heddle.bus.payloads import offload, payload_prefix, resolve
from heddle.bus.publisher import PublishAck, Publisher
from heddle.events import Event, ToolCall, WorkerCommand
from heddle.events.codec import encode_wire_form, wire_form
from heddle.events.subjects import subject_for_command, subject_for_event

M = TypeVar("M", bound=Event | WorkerCommand | ToolCall)


@dataclass(frozen=True, slots=True)
class Forward:
    """A stored message passed on as it is, to another subject (the control plane delivering a
    trajectory's terminal event to its trainer's stream): the same bytes, references to
    offloaded arrays included, de-duplicated by ``message_id``."""

    subject: str
    data: bytes
    message_id: str


@dataclass(frozen=True, slots=True)
class Rerouted:
    """An event published on a subject other than its own (a trainer's record that the control
    plane built: a failed trajectory's, ``heddle.controlplane.gating``), encoded and offloaded as
    any event, de-duplicated by ``message_id``."""

    subject: str
    event: Event
    message_id: str


Outgoing = Event | WorkerCommand | ToolCall | Forward | Rerouted


class Outbox:
    def __init__(
        self, js: JetStreamContext, publisher: Publisher, payloads: Objects, max_event_bytes: int
    ) -> None:
        self.js = js
        self.publisher = publisher
        self.payloads = payloads
        self.max_event_bytes = max_event_bytes

    async def publish(self, message: Event | WorkerCommand | ToolCall) -> PublishAck:
        return await self.publisher.publish(*await self._envelope(message))

    async def publish_many(self, messages: Iterable[Outgoing]) -> list[PublishAck]:
        """Acks in input order. Each message is encoded just before it is sent, while those
        before it are in flight: the server stores while the client encodes."""
        window = self.publisher.window()
        for message in messages:
            await window.send(*await self._envelope(message))
        return await window.drain()

    async def _envelope(self, message: Outgoing) -> tuple[str, bytes, str]:
        if isinstance(message, Forward):
            return message.subject, message.data, message.message_id
        if isinstance(message, Rerouted):
            data = await self._encoded(message.event, message.message_id)
            return message.subject, data, message.message_id
        subject, message_id = address(message)
        return subject, await self._encoded(message, message_id), message_id

    async def _encoded(self, message: Event | WorkerCommand | ToolCall, message_id: str) -> bytes:
        packed = wire_form(message)  # built once: its arrays are compressed
        data = encode_wire_form(packed)
        if len(data) > self.max_event_bytes:
            data = await offload(
                packed,
                data,
                message_id=message_id,
                max_bytes=self.max_event_bytes,
                bucket=PAYLOADS_BUCKET,
                put=self.payloads.put_once,
            )
        return data

    async def resolve(self, message: M) -> M:
        return await resolve(message, self._get_payload)

    async def _get_payload(self, bucket: str, name: str) -> bytes:
        store = self.payloads if bucket == self.payloads.bucket else Objects(self.js, bucket)
        return await store.get(name)

    async def payload_bytes(self) -> int:
        try:
            return (await state.stream_state(self.js, f"OBJ_{PAYLOADS_BUCKET}")).num_bytes
        except NotFoundError:
            return 0

    async def delete_payloads(self, rollout_id: str) -> int:
        names = await self.payloads.names(payload_prefix(rollout_id))
        for name in names:
            await self.payloads.delete(name)
        return len(names)


def address(message: Event | WorkerCommand | ToolCall) -> tuple[str, str]:
    """(subject, the message's id for de-duplication)."""
    if isinstance(message, Event):
        return subject_for_event(message), message.event_id
    return subject_for_command(message), message.command_id
