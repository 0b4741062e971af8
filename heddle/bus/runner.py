"""The pull-consumer runner every Heddle consumer uses (projector, deciders, executors, workers).

One runner drives one durable pull consumer: fetch a batch, decode each message with the
channel's decoder, hand the messages to the handler, then acknowledge. Contracts:

- Ack after the handler returns (i.e. after its SQL commit or its published events); a crash
  before that leaves the messages unacknowledged, and the server redelivers them.
- Undecodable messages, messages on a subject they do not belong on
  (``heddle.events.subjects``) and messages the handler rejects are dead-lettered
  (``DeadLettered`` on ``heddle.evt.deadletter.<role>``, the consumer's role, with consumer,
  subject, stream sequence, reason and a truncated payload) and terminated; the valid messages
  of the same batch are processed normally.
- ``TransientError`` from the handler: explicit-ack consumers nak the messages with
  ``nak_delay_s``; in-order (``ack_all``) consumers instead *rewind*: the durable is recreated
  from the first unprocessed sequence after ``nak_delay_s``, since one later ack would
  otherwise acknowledge the nak'ed messages too.
- Any other exception from the handler naks what it was given and stops the runner by
  re-raising it from ``run()``: a bug crashes loudly instead of spinning.
- ``stop()`` is graceful: the current batch (or every running message handler) finishes and is
  acked; messages fetched but never handled are nak'ed for prompt redelivery.

``BatchRunner`` (``heddle.bus.batch_runner``) hands whole batches to one handler call, in stream
order. ``MessageRunner`` (``heddle.bus.message_runner``) handles messages concurrently, sending
in-progress signals for long handlers so they are not redelivered meanwhile. This module holds
what both share.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from heddle.bus.delivery import Decoder, Delivery, Rejection
from heddle.bus.pull import PullInbox, RawMessage
from heddle.bus.streams import ConsumerSpec, provision_consumer
from heddle.bus.transient import is_transient, retry_storage_refusals
from heddle.bus.wire import LeanClient, parse_ack_subject
from heddle.events import DeadLettered
from heddle.events.subjects import parse_subject, subject_mismatch
from heddle.ids import derive_id

T = TypeVar("T")
log = logging.getLogger(__name__)

MAX_DEAD_LETTER_PAYLOAD_CHARS = 4096
ACK = b"+ACK"
TERM = b"+TERM"
IN_PROGRESS = b"+WPI"

CONSUMER_TROUBLE = (b"409", b"503")
"""Statuses that end pull requests to a consumer that may be gone."""

DeadLetterPublisher = Callable[[DeadLettered], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Refused:
    """A message to dead-letter: undecodable, on the wrong subject, or refused by a handler."""

    subject: str
    reply: str
    sequence: int
    data: bytes
    reason: str

    @classmethod
    def of(cls, rejection: Rejection) -> Refused:
        d = rejection.delivery
        return cls(d.subject, d.ack_subject, d.stream_sequence, d.data, rejection.reason)


def dead_letter(message: Refused, spec: ConsumerSpec) -> DeadLettered:
    """The dead letter of a refused message, on the subject of the consumer's role (its id
    derives from the consumer and the sequence: refused again after a redelivery, it is stored
    once)."""
    durable, stream = spec.durable, spec.stream
    try:
        rollout_id = parse_subject(message.subject).rollout_id or ""
    except ValueError:
        rollout_id = ""
    sequence = message.sequence
    log.warning("%s dead-letters %s #%d: %s", durable, message.subject, sequence, message.reason)
    return DeadLettered(
        event_id=derive_id("deadletter", durable, stream, sequence),
        rollout_id=rollout_id,
        occurred_at=time.time(),
        consumer=durable,
        subject=message.subject,
        stream_sequence=sequence,
        reason=message.reason[:2000],
        payload=message.data[:MAX_DEAD_LETTER_PAYLOAD_CHARS].decode("utf-8", errors="replace"),
        role=spec.role,
    )


def nak_body(delay_s: float) -> bytes:
    """A negative acknowledgement: redeliver after ``delay_s`` (at once when 0)."""
    if delay_s <= 0:
        return b"-NAK"
    return b'-NAK {"delay": %d}' % int(delay_s * 1e9)


class ConsumerLost(RuntimeError):
    """The runner's durable consumer disappeared and the runner cannot safely recreate it."""


@dataclass(slots=True)
class RunnerStats:
    num_fetched: int = 0
    num_acked: int = 0
    num_dead_lettered: int = 0
    num_retried: int = 0
    """Messages nak'ed or rewound after a transient error."""
    num_batches: int = 0


class ConsumerRunner(Generic[T]):
    """Fetch, decode, dead-letter and acknowledge; subclasses dispatch to their handler."""

    def __init__(
        self,
        client: LeanClient,
        js: JetStreamContext,
        spec: ConsumerSpec,
        decode: Decoder[T],
        dead_letter: DeadLetterPublisher,
    ) -> None:
        self.spec = spec
        self.stats = RunnerStats()
        self._client = client
        self._js = js
        self._decode = decode
        self._dead_letter_publish = dead_letter
        self._inbox: PullInbox | None = None
        self._stopping = False
        self._until_idle = False

    def stop(self) -> None:
        """Ask the runner to finish its current work and return from ``run()`` (a stop asked
        before ``run()`` makes it return at once: a process told to stop while it was still
        starting, e.g. by SIGTERM, stops)."""
        self._stopping = True
        if self._inbox is not None:
            self._inbox.interrupt()

    async def run(self, *, until_idle: bool = False) -> RunnerStats:
        """Provision the durable and process messages until ``stop()``; with ``until_idle``,
        also return once the consumer has nothing pending (everything published so far is
        handled). A runner may run again after it returned."""
        self._until_idle = until_idle
        try:
            if self._stopping:
                return self.stats
            await self._provision(self.spec)
            await self._open_inbox()
            try:
                await self._loop()
            finally:
                await self._close_inbox()
        finally:
            self._stopping = False
        return self.stats

    async def _loop(self) -> None:
        raise NotImplementedError

    async def _provision(self, spec: ConsumerSpec) -> None:
        what = f"consumer {spec.durable}"
        await retry_storage_refusals(lambda: provision_consumer(self._js, spec), what)

    async def _open_inbox(self) -> PullInbox:
        self._inbox = await PullInbox(self._client, self.spec.stream, self.spec.durable).open()
        return self._inbox

    async def _close_inbox(self) -> None:
        inbox, self._inbox = self._inbox, None
        if inbox is None:
            return
        for raw in await inbox.close():
            await self._send(raw.reply, self._nak_body(0.0))

    async def _fetch(self, max_messages: int, *, prefetch: bool = False) -> list[RawMessage]:
        inbox = self._inbox
        assert inbox is not None, "fetch before open"
        spec = self.spec
        raws = await inbox.fetch(
            max_messages, spec.fetch_wait_s, prefetch=prefetch, gather_s=spec.gather_s
        )
        self.stats.num_fetched += len(raws)
        if raws:
            return raws
        # Nothing came: idle, or the durable is gone (409 to waiting requests, 503 to new ones).
        if self._until_idle or inbox.last_status in CONSUMER_TROUBLE:
            inbox.last_status = b""
            try:
                if await self._is_caught_up() and self._until_idle:
                    self._stopping = True
            except NotFoundError:
                await self._consumer_lost()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                # A cluster electing the consumer's leader, or a reconnect: the next fetch
                # tries again.
                log.info("%s: consumer info unavailable (%r)", self.spec.durable, exc)
        return raws

    async def _is_caught_up(self) -> bool:
        # Handled means acked: a message nak'ed with a delay (or delivered to a crashed
        # process) is not pending delivery but still waits for its redelivery.
        info = await self._js.consumer_info(self.spec.stream, self.spec.durable)
        if info.num_pending or info.num_ack_pending:
            return False
        return self._inbox is None or not self._inbox.num_buffered

    async def _consumer_lost(self) -> None:
        """The durable was deleted under the runner (an operator, a competing process)."""
        raise ConsumerLost(
            f"consumer {self.spec.durable} of {self.spec.stream} was deleted while running"
        )

    async def _decode_all(self, raws: list[RawMessage]) -> list[Delivery[T]]:
        """Decode a fetched batch; undecodable messages are dead-lettered on the way."""
        deliveries, refused = self._decode_batch(raws)
        for message in refused:
            await self._reject(message)
        return deliveries

    def _decode_batch(self, raws: Sequence[RawMessage]) -> tuple[list[Delivery[T]], list[Refused]]:
        """The batch's deliveries, and the messages to dead-letter: undecodable, or on a
        subject they do not belong on."""
        deliveries: list[Delivery[T]] = []
        refused: list[Refused] = []
        decode = self._decode
        for raw in raws:
            info = parse_ack_subject(raw.reply)
            subject = raw.subject.decode()
            try:
                message = decode(raw.data)
                reason = subject_mismatch(subject, message)
            except ValueError as exc:
                reason = str(exc)
            if reason is not None:
                reply = raw.reply.decode()
                refused.append(Refused(subject, reply, info.stream_sequence, raw.data, reason))
                continue
            deliveries.append(
                Delivery(
                    message, subject, info.stream_sequence, info.num_delivered,
                    info.num_pending, raw.data, raw.reply.decode(),
                    info.timestamp_ns * 1e-9, raw.received_at,
                )
            )  # fmt: skip
        return deliveries, refused

    async def _reject(self, message: Refused) -> None:
        """Publish the message as a dead letter, then terminate it (never redelivered)."""
        await self._dead_letter_publish(dead_letter(message, self.spec))
        await self._send(message.reply, TERM)
        self.stats.num_dead_lettered += 1

    async def _ack(self, delivery: Delivery[Any]) -> None:
        await self._send(delivery.ack_subject, ACK)
        self.stats.num_acked += 1

    async def _nak(self, deliveries: list[Delivery[Any]], delay_s: float) -> None:
        body = self._nak_body(delay_s)
        for delivery in deliveries:
            await self._send(delivery.ack_subject, body)
        self.stats.num_retried += len(deliveries)

    @staticmethod
    def _nak_body(delay_s: float) -> bytes:
        return nak_body(delay_s)

    async def _send(self, reply: bytes | str, body: bytes) -> None:
        subject = reply.decode() if isinstance(reply, bytes) else reply
        await self._client.publish(subject, body)
