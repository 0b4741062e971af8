"""JetStream publishing with de-duplication ids, bounded in-flight windows and retries.

Each publish carries ``Nats-Msg-Id`` and a reply inbox; the stream's acknowledgement (its
sequence, or ``duplicate`` when the id was already stored within the duplicate window) comes back
on that inbox. A publish whose acknowledgement does not arrive in time (a server restart, a lost
connection) is sent again with the SAME id: if the first copy was stored, the server answers
``duplicate`` and stores nothing. Our own futures and timeouts replace nats-py's
``publish_async``, whose futures never resolve on some server rejections (nats.py#985).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec
import nats.errors

from heddle.bus.wire import LeanClient, SinkSubscription, status_of
from heddle.errors import UserError

STORAGE_REFUSALS = frozenset({10012, 10047, 10077})
"""JetStream error codes of a store that cannot take a write now: a consumer's store could
not be created (10012), storage resources are exhausted (10047), a stream's store failed
(10077). A full disk answers so; the request can succeed once space is back."""


@dataclass(frozen=True, slots=True)
class PublishAck:
    stream: str
    sequence: int
    """Stream sequence of the stored message (of the original, for a duplicate)."""
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class PublishOptions:
    ack_timeout_s: float = 5.0
    """Wait for one acknowledgement before sending the message again (same id)."""
    retry_deadline_s: float = 60.0
    """Give up (``PublishError``) when a message is still unacknowledged after this long."""
    retry_backoff_s: float = 0.25
    """Pause before resending after a refusal (no stream responding, connection down)."""
    max_in_flight: int = 256
    """Most unacknowledged publishes of one ``publish_many`` call."""


class PublishError(RuntimeError):
    """The stream rejected a message, or it stayed unacknowledged past the retry deadline."""

    def __init__(self, subject: str, reason: str, err_code: int = 0) -> None:
        super().__init__(f"publish to {subject} failed: {reason}")
        self.subject = subject
        self.reason = reason
        self.err_code = err_code


class PublishDenied(PublishError, UserError):
    """The server refused this connection's credential the subject (a permissions violation)."""


class PayloadTooLarge(PublishError):
    """The message exceeds the server's maximum payload: sending it again cannot help."""


_HEADER_TOO_LARGE = 10097
"""JetStream error code: the message's headers exceed 64 KiB."""
_DENIED = -1
"""``_Rejected.err_code`` of a publish the server refused for permissions."""


class _Retry(Exception):
    """An attempt that may succeed if repeated with the same message id."""


class _Rejected(Exception):
    """The stream answered with an API error (not retried)."""

    def __init__(self, description: str, err_code: int) -> None:
        super().__init__(description)
        self.description = description
        self.err_code = err_code


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _AckReply(msgspec.Struct):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: _ApiError | None = None


_decode_ack = msgspec.json.Decoder(_AckReply).decode
_RETRYABLE_SEND_ERRORS = (
    nats.errors.OutboundBufferLimitError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
)


@dataclass(slots=True)
class _Outgoing:
    index: int
    subject: str
    data: bytes
    msg_id: str | None
    started_at: float
    """When the first copy was sent (the retry deadline counts from here)."""
    sent_at: float = 0.0
    """When the latest copy was sent (its ack timeout counts from here)."""
    future: asyncio.Future[PublishAck] | None = None
    token: bytes = b""
    """The reply subject of the latest copy (its entry in ``Publisher._waiting``)."""


class Publisher:
    """Publishes to JetStream over one client; ``open()`` before use, ``close()`` after."""

    def __init__(self, client: LeanClient, options: PublishOptions | None = None) -> None:
        self._client = client
        self.options = options or PublishOptions()
        self._prefix = client.new_inbox()
        self._tokens = itertools.count()
        self._waiting: dict[bytes, tuple[asyncio.Future[PublishAck], str, float]] = {}
        """Per reply subject of an awaited publish, its future, the subject it went to (to
        fail those the server refuses) and when its message was first sent."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscription: SinkSubscription | None = None
        self._resume_at = 0.0
        """Monotonic time before which sends pause, after the server refused one."""
        self.num_resent = 0
        """Messages sent again (same id) after a timeout or a refusal."""
        self.is_held = False
        """While set, an unacknowledged message is sent again past the retry deadline instead
        of failing: its stream is known to refuse writes for now (a full disk), so publishers
        pause until it takes them (``Bus.hold_publishes``)."""

    async def open(self) -> Publisher:
        self._loop = asyncio.get_running_loop()
        self._subscription = await self._client.subscribe_sink(f"{self._prefix}.*", self._receive)
        return self

    async def close(self) -> None:
        if self._subscription is not None:
            await self._subscription.close()
            self._subscription = None
        for future, _, _ in self._waiting.values():
            future.cancel()
        self._waiting.clear()

    async def publish(self, subject: str, data: bytes, msg_id: str | None) -> PublishAck:
        """Publish one message and wait for it to be stored (retrying as documented above)."""
        acks = await self.publish_many([(subject, data, msg_id)])
        return acks[0]

    async def publish_many(
        self, messages: Iterable[tuple[str, bytes, str | None]]
    ) -> list[PublishAck]:
        """Publish (subject, payload, msg id) triples with at most ``max_in_flight`` awaiting
        their acknowledgement; returns the acks in input order."""
        window = self.window()
        for subject, data, msg_id in messages:
            await window.send(subject, data, msg_id)
        return await window.drain()

    def window(self) -> PublishWindow:
        """A window to send messages through one at a time (each prepared just before it is
        sent, while the ones before it are in flight); ``drain()`` it for the acks."""
        return PublishWindow(self)

    async def _settle_oldest(self, window: deque[_Outgoing], acks: list[PublishAck | None]) -> None:
        outgoing = window.popleft()
        try:
            acks[outgoing.index] = await self._await_ack(outgoing)
        except _Rejected as exc:
            if exc.err_code == _DENIED:
                raise PublishDenied(outgoing.subject, exc.description) from None
            raise PublishError(outgoing.subject, exc.description, exc.err_code) from None
        except _Retry as exc:
            waited_s = time.monotonic() - outgoing.started_at
            if waited_s > self.options.retry_deadline_s and not self.is_held:
                raise PublishError(outgoing.subject, f"not acknowledged: {exc}") from None
            self.num_resent += 1
            await self._send(outgoing)
            window.append(outgoing)

    async def _await_ack(self, outgoing: _Outgoing) -> PublishAck:
        future = outgoing.future
        if future is None:
            raise _Retry("connection unavailable")
        if not future.done():
            remaining_s = outgoing.sent_at + self.options.ack_timeout_s - time.monotonic()
            try:
                await asyncio.wait_for(future, max(remaining_s, 0.0))
            except TimeoutError:
                self._forget(outgoing.token)  # a late ack of this copy is dropped
                raise _Retry(f"no acknowledgement within {self.options.ack_timeout_s} s") from None
        return future.result()

    async def _send(self, outgoing: _Outgoing) -> None:
        pause_s = self._resume_at - time.monotonic()
        if pause_s > 0:
            await asyncio.sleep(pause_s)
        reply = f"{self._prefix}.{next(self._tokens)}"
        token = reply.encode()
        loop = self._loop or asyncio.get_running_loop()
        future: asyncio.Future[PublishAck] = loop.create_future()
        self._waiting[token] = (future, outgoing.subject, outgoing.started_at)
        outgoing.sent_at = time.monotonic()
        try:
            if outgoing.msg_id:
                await self._client.publish_with_id(
                    outgoing.subject, outgoing.data, reply, outgoing.msg_id
                )
            else:
                await self._client.publish(outgoing.subject, outgoing.data, reply=reply)
        except _RETRYABLE_SEND_ERRORS:
            self._forget(token)
            self._pause()
            outgoing.future = None
            return
        except nats.errors.MaxPayloadError:
            self._forget(token)
            raise PayloadTooLarge(
                outgoing.subject, f"payload of {len(outgoing.data)} bytes exceeds the server limit"
            ) from None
        outgoing.future = future
        outgoing.token = token

    def _forget(self, token: bytes) -> None:
        self._waiting.pop(token, None)

    def deny(self, subject: str, reason: str) -> None:
        """Fail every awaited publish to ``subject``: the server refused it (``PublishDenied``
        from the publish call, instead of resending it until the retry deadline)."""
        for token, (future, waiting_subject, _) in list(self._waiting.items()):
            if waiting_subject == subject and not future.done():
                self._forget(token)
                future.set_exception(_Rejected(reason, _DENIED))

    def unacknowledged_s(self) -> float:
        """How long the oldest message still awaiting its acknowledgement has waited (0.0:
        none waits): a server that answers but stores nothing shows here first."""
        if not self._waiting:
            return 0.0
        return time.monotonic() - min(started for _, _, started in self._waiting.values())

    def _pause(self) -> None:
        self._resume_at = time.monotonic() + self.options.retry_backoff_s

    def _receive(self, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        entry = self._waiting.pop(subject, None)
        if entry is None or entry[0].done():
            return
        future = entry[0]
        status = status_of(headers)
        if status is not None:
            # 503: no stream listens on the subject yet (server restarting, stream missing).
            self._pause()
            future.set_exception(_Retry(f"server status {status.decode()}"))
            return
        try:
            reply_body = _decode_ack(data)
        except msgspec.DecodeError:
            future.set_exception(_Retry(f"unreadable acknowledgement {data[:200]!r}"))
            return
        if reply_body.error is not None:
            error = reply_body.error
            if error.err_code in STORAGE_REFUSALS:
                # The store cannot take it now (a full disk, exhausted storage): pause, and
                # send it again with the same id once it can.
                self._pause()
                future.set_exception(_Retry(f"the store refuses: {error.description}"))
                return
            if error.err_code == _HEADER_TOO_LARGE:
                # Heddle's headers are a few dozen bytes: the server read a copy garbled in a
                # fail-over (seen when a cluster node died mid-publish); the same id again is
                # safe.
                future.set_exception(_Retry(f"server read a garbled copy: {error.description}"))
                return
            future.set_exception(_Rejected(error.description, error.err_code))
            return
        future.set_result(PublishAck(reply_body.stream, reply_body.seq, reply_body.duplicate))


class PublishWindow:
    """A ``Publisher``'s sending side for one batch (it drives the publisher's own retries).

    Sends in order through one publisher with at most ``max_in_flight`` unacknowledged: a
    send first waits for the oldest when the window is full (retrying it as ``Publisher``
    documents). Owned by one task; ``drain()`` once, after the last send."""

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._acks: list[PublishAck | None] = []
        self._in_flight: deque[_Outgoing] = deque()

    async def send(self, subject: str, data: bytes, msg_id: str | None) -> None:
        publisher = self._publisher
        while len(self._in_flight) >= publisher.options.max_in_flight:
            await publisher._settle_oldest(self._in_flight, self._acks)
        outgoing = _Outgoing(len(self._acks), subject, data, msg_id, time.monotonic())
        self._acks.append(None)
        await publisher._send(outgoing)
        self._in_flight.append(outgoing)

    async def drain(self) -> list[PublishAck]:
        """Wait for every message sent; their acks in send order. On the first failure the
        others are given up (their outcome is not waited for)."""
        try:
            while self._in_flight:
                await self._publisher._settle_oldest(self._in_flight, self._acks)
        except BaseException:
            self._give_up()
            raise
        return [ack for ack in self._acks if ack is not None]

    def _give_up(self) -> None:
        for outgoing in self._in_flight:
            self._publisher._forget(outgoing.token)
            future = outgoing.future
            if future is not None and future.done() and not future.cancelled():
                future.exception()  # retrieved: a refusal of the same batch, already told
            elif future is not None:
                future.cancel()
        self._in_flight.clear()
