"""Pull requests to one JetStream consumer, and the inbox that buffers what they deliver.

The JetStream pull protocol: publish ``{"batch": n, "no_wait": true}`` (or ``"expires": ns`` for
a request that lingers until messages arrive) to ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``
with an inbox as reply subject. The server delivers up to ``n`` messages to the inbox, in consumer
order, then ends the request with a status message (404 no messages, 408 expired, 409 conflict)
unless the batch was filled. Requests are served first-in first-out, so the inbox can keep
several open to overlap the network with the caller's work.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from heddle.bus.wire import LeanClient, SinkSubscription, parse_ack_subject, status_of

_HEARTBEAT = b"100"
_WAIT_MARGIN_S = 2.0
"""How long past a request's expiry we wait for its status before assuming it was lost."""


class RawMessage(NamedTuple):
    subject: bytes
    reply: bytes
    """The ``$JS.ACK...`` subject: acks go there, and it carries the delivery metadata."""
    data: bytes
    received_at: float = 0.0
    """``time.perf_counter()`` when the inbox received it (decision latency starts there)."""


def delivery_after(raws: Sequence[RawMessage], expected: int) -> int | None:
    """The consumer sequence after ``raws`` when they are exactly the deliveries from
    ``expected`` on; None on a gap (deliveries lost in transit, or taken by another runner of
    the same durable)."""
    first = parse_ack_subject(raws[0].reply).consumer_sequence
    last = parse_ack_subject(raws[-1].reply).consumer_sequence
    if first != expected or last - first + 1 != len(raws):
        return None
    return last + 1


class _PullRequest(msgspec.Struct, omit_defaults=True):
    batch: int
    expires: int = 0
    no_wait: bool = False


_encode_request = msgspec.json.Encoder().encode


class PullInbox:
    """The inbox of one pull consumer: sends pull requests and buffers their messages.

    ``fetch`` is the simple interface (wait for up to a batch); ``request`` / ``wait`` / ``take``
    let a reader keep requests in flight while it works on what already arrived.
    """

    def __init__(self, client: LeanClient, stream: str, consumer: str) -> None:
        self._client = client
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = client.new_inbox()
        self._buffer: deque[RawMessage] = deque()
        self._open: deque[int] = deque()
        """Messages still owed by each open request, oldest first."""
        self._num_lingering = 0
        """Open requests that wait for messages (``expires``) rather than answer at once."""
        self._subscription: SinkSubscription | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._wake_at = 1
        self.last_status = b""
        """Code of the last status that ended a request (``b"404"``, ``b"408"``, ``b"409"``)."""

    async def open(self) -> PullInbox:
        self._subscription = await self._client.subscribe_sink(self._inbox, self._receive)
        return self

    async def close(self) -> list[RawMessage]:
        """Unsubscribe; returns the messages delivered but never taken (the caller naks them)."""
        if self._subscription is not None:
            await self._subscription.close()
            self._subscription = None
        leftover = list(self._buffer)
        self._buffer.clear()
        self._forget_requests()
        return leftover

    @property
    def num_buffered(self) -> int:
        return len(self._buffer)

    @property
    def num_requested(self) -> int:
        """Messages asked for by open requests and not delivered yet."""
        return sum(self._open)

    @property
    def has_open_requests(self) -> bool:
        return bool(self._open)

    async def request(self, num_messages: int, *, expires_s: float | None = None) -> None:
        """Ask for up to ``num_messages``: now (``no_wait``) or lingering ``expires_s`` seconds."""
        if expires_s is None:
            body = _PullRequest(batch=num_messages, no_wait=True)
        else:
            body = _PullRequest(batch=num_messages, expires=max(int(expires_s * 1e9), 1_000_000))
            self._num_lingering += 1
        self._open.append(num_messages)
        await self._client.publish(self._next_subject, _encode_request(body), reply=self._inbox)

    async def wait(self, num_messages: int, timeout_s: float) -> None:
        """Wait until ``num_messages`` are buffered, no request is open, or the timeout passes.

        A timeout forgets the open requests (their status was lost, e.g. in a reconnect), so the
        next call asks again; late messages of a forgotten request still land in the buffer.
        """
        if not await self._waited(num_messages, timeout_s):
            self._forget_requests()

    async def _waited(self, num_messages: int, timeout_s: float) -> bool:
        """Wait until ``num_messages`` are buffered or no request is open (True), or until the
        timeout passes (False); the open requests are left as they are."""
        if len(self._buffer) >= num_messages or not self._open:
            return True
        self._wake_at = num_messages
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(self._waiter, timeout_s)
        except TimeoutError:
            return False
        finally:
            self._waiter = None
        return True

    def _forget_requests(self) -> None:
        self._open.clear()
        self._num_lingering = 0

    def interrupt(self) -> None:
        """End a pending ``wait`` early (the runner is stopping)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self, max_messages: int) -> list[RawMessage]:
        """Remove and return up to ``max_messages`` buffered messages, oldest first."""
        buffer = self._buffer
        if len(buffer) <= max_messages:
            taken = list(buffer)
            buffer.clear()
            return taken
        return [buffer.popleft() for _ in range(max_messages)]

    async def fetch(
        self, max_messages: int, wait_s: float, *, prefetch: bool = False, gather_s: float = 0.0
    ) -> list[RawMessage]:
        """Up to ``max_messages`` messages: what is available now, else wait up to ``wait_s``
        for the first to arrive. Returns ``[]`` when none came (the consumer is idle).

        With ``gather_s``, a fetch that has fewer than ``max_messages`` waits up to that long
        for the rest while a request is still open (a live stream delivers one message at a
        time: without it, each batch is the one message that woke the reader). With
        ``prefetch``, a full batch is followed at once by a request for the next one, so the
        server streams it while the caller works (the consumer's ``max_ack_pending`` must allow
        two batches)."""
        if len(self._buffer) < max_messages and not self._open:
            await self.request(max_messages - len(self._buffer))
        if len(self._buffer) < max_messages and self._open:
            wanted = 1 if self._num_lingering else max_messages
            await self.wait(wanted, _WAIT_MARGIN_S + wait_s)
        if not self._buffer and wait_s > 0:
            if not self._open:
                await self.request(max_messages, expires_s=wait_s)
            await self.wait(1, wait_s + _WAIT_MARGIN_S)
        if gather_s > 0 and self._buffer and len(self._buffer) < max_messages and self._open:
            await self._waited(max_messages, gather_s)  # a timeout is the gather's normal end
        taken = self.take(max_messages)
        if prefetch and len(taken) == max_messages and not self._open:
            await self.request(max_messages)
        return taken

    def _end_request(self) -> None:
        self._open.popleft()
        if not self._open:
            self._num_lingering = 0

    def _receive(self, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        status = status_of(headers)
        if status is None:
            self._buffer.append(RawMessage(subject, reply, data, time.perf_counter()))
            if self._open:
                self._open[0] -= 1
                if self._open[0] <= 0:
                    self._end_request()
        elif status != _HEARTBEAT:
            self.last_status = status
            if self._open:
                self._end_request()
        waiter = self._waiter
        is_due = len(self._buffer) >= self._wake_at or not self._open
        if waiter is not None and is_due and not waiter.done():
            waiter.set_result(None)
