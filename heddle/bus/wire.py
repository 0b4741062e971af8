"""The nats-py client with a lean delivery path for Heddle's high-volume inboxes.

nats-py turns every incoming message into a ``Msg`` (parsing its headers with a generic parser)
and routes it through an ``asyncio.Queue`` to a subscription; for 4-8 KiB step events that costs
more than decoding them. ``LeanClient`` lets the bus attach a *sink* to a subscription: the
subject, reply subject, payload and raw header bytes of each message go straight to a synchronous
function. Publishing the other way, ``publish_with_id`` writes a message with its
``Nats-Msg-Id`` header as one ``HPUB`` frame, without nats-py's per-call subject validation and
header building (Heddle's subjects are checked where they are made, ``heddle.events.subjects``).
Everything else (connect, auth, TLS, reconnect, pings, the JetStream management API) is
nats-py's own, with two corrections: a client that ``requires_tls`` refuses a server that offers
none (nats-py would go on in plaintext) and upgrades on one that merely allows it; and a
permission violation reaches the error callback as the server wrote it (nats-py's parser
lowercases every ``-ERR``, subjects included). The overrides hook ``Client._process_msg``,
``_process_info``, ``_process_err`` and the pending-buffer methods ``_send_command`` /
``_flush_pending``, stable across nats-py 2.x (pyproject pins ``nats-py<3``); only this module
depends on them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from nats import errors
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

Sink = Callable[[bytes, bytes, bytes, bytes | None], None]
"""Receives (subject, reply, payload, raw headers or None) of each message, synchronously."""

_STATUS_PREFIX = b"NATS/1.0 "
_PERMISSION_ERROR = re.compile(rb"-ERR\s+('Permissions Violation[^'\r\n]*')", re.IGNORECASE)
_MAX_ERROR_TEXTS = 64
_MAX_ERROR_LINE = 1024
"""Longest ``-ERR`` line looked back for (a subject of up to ~1,000 bytes)."""


class TlsRequired(errors.Error):
    """The client requires TLS and the server offers none."""

    def __str__(self) -> str:
        return (
            "the server offers no TLS, and this client requires it (a CA, --nats-tls-ca, or a "
            "tls:// URL was given): a plaintext connection is refused"
        )


class LeanClient(Client):
    """A nats-py ``Client`` whose sink subscriptions bypass ``Msg`` construction and queues."""

    def __init__(self) -> None:
        super().__init__()
        self._sinks: dict[int, Sink] = {}
        self._ps = LeanParser(self)
        self.requires_tls = False
        """Refuse a server that offers no TLS (set before ``connect``)."""
        self._error_texts: dict[str, str] = {}
        """Permission violations as the server wrote them, by their lowercased form."""

    async def _process_info(self, info: dict[str, Any], initial_connection: bool = False) -> None:
        if initial_connection and self.requires_tls and not info.get("tls_required"):
            if not info.get("tls_available"):
                raise TlsRequired
            info["tls_required"] = True  # the server allows TLS: nats-py then upgrades
        await super()._process_info(info, initial_connection=initial_connection)

    def remember_errors(self, data: bytearray, start: int = 0) -> None:
        """Keep the permission violations in ``data[start:]`` as written (``_process_err``)."""
        for match in _PERMISSION_ERROR.finditer(data, start):
            text = bytes(match.group(1)).decode(errors="replace")
            if len(self._error_texts) >= _MAX_ERROR_TEXTS:
                self._error_texts.clear()
            self._error_texts[text.lower()] = text

    async def _process_err(self, err_msg: str) -> None:
        original = self._error_texts.get(err_msg)
        if original is None:
            await super()._process_err(err_msg)
            return
        # A permission violation leaves the connection open (as nats-py does): report it with
        # its subject's own case, so a refused publish can be matched to its subject.
        error = errors.Error(f"nats: {original.strip(chr(39))}")
        self._err = error
        await self._error_cb(error)

    async def subscribe_sink(self, subject: str, sink: Sink) -> SinkSubscription:
        """Subscribe ``sink`` to ``subject`` (usually an inbox); it runs in the read loop, so it
        must be quick and must not block."""
        subscription = await self.subscribe(subject)
        self._sinks[subscription._id] = sink
        return SinkSubscription(self, subscription)

    async def publish_with_id(self, subject: str, payload: bytes, reply: str, msg_id: str) -> None:
        """``publish(subject, payload, reply=reply, headers={"Nats-Msg-Id": msg_id})`` for a
        valid subject and reply (an id with a line break takes nats-py's path), with nats-py's
        errors: not connected with a full buffer, a payload over the server's limit."""
        if "\r" in msg_id or "\n" in msg_id:  # nats-py's header path cleans these
            await self.publish(subject, payload, reply=reply, headers={"Nats-Msg-Id": msg_id})
            return
        if self.is_closed:
            raise errors.ConnectionClosedError
        if self.is_draining_pubs:
            raise errors.ConnectionDrainingError
        size = len(payload)
        if not self.is_connected and (
            self._max_pending_size <= 0 or size + self._pending_data_size > self._max_pending_size
        ):
            raise errors.OutboundBufferLimitError
        if size > self._max_payload:
            raise errors.MaxPayloadError
        header = b"NATS/1.0\r\nNats-Msg-Id: " + msg_id.encode() + b"\r\n\r\n"
        control = f"HPUB {subject} {reply} {len(header)} {len(header) + size}\r\n".encode()
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += size
        command = b"".join((control, header, payload, b"\r\n"))
        # nats-py's _send_command, without a coroutine per message.
        self._pending.append(command)
        self._pending_data_size += len(command)
        if self._max_pending_size > 0 and self._pending_data_size > self._max_pending_size:
            await self._flush_pending(force_flush=True)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    async def _process_msg(
        self,
        sid: int,
        subject: bytes,
        reply: bytes,
        data: bytes,
        headers: bytes | None,
    ) -> None:
        sink = self._sinks.get(sid)
        if sink is None:
            await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]
            return
        sink(subject, reply, data, headers)


class LeanParser(Parser):
    """nats-py's protocol parser with a fast path for complete ``MSG`` / ``HMSG`` frames of sink
    subscriptions at the front of the buffer; anything else (partial frames, other
    subscriptions, PING, INFO, errors) goes through nats-py's own parser."""

    nc: LeanClient

    async def parse(self, data: bytes = b"") -> None:
        buffer = self.buf
        buffer.extend(data)
        # The new bytes and what may precede them of a frame split across reads.
        start = max(0, len(buffer) - len(data) - _MAX_ERROR_LINE)
        if buffer.find(b"-ERR", start) >= 0:
            self.nc.remember_errors(buffer, start)
        if self.state == AWAITING_CONTROL_LINE:
            consumed, is_waiting = self._deliver_to_sinks(buffer)
            if consumed:
                del buffer[:consumed]
            if is_waiting:
                return
        if buffer:
            await super().parse()

    def _deliver_to_sinks(self, buffer: bytearray) -> tuple[int, bool]:
        """Hand the leading complete sink frames to their sinks. Returns the bytes used, and
        whether the next frame is an incomplete one (wait for more bytes) rather than one for
        nats-py's parser."""
        sinks = self.nc._sinks
        position = 0
        size = len(buffer)
        while position < size:
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                return position, True
            tokens = bytes(buffer[position:line_end]).split()
            operation = tokens[0] if tokens else b""
            if operation == b"HMSG" and len(tokens) in (5, 6):
                header_size, total_size = int(tokens[-2]), int(tokens[-1])
            elif operation == b"MSG" and len(tokens) in (4, 5):
                header_size, total_size = 0, int(tokens[-1])
            else:
                return position, False
            sink = sinks.get(int(tokens[2]))
            if sink is None:
                return position, False
            start = line_end + 2
            end = start + total_size
            if end + 2 > size:
                return position, True
            has_reply = len(tokens) == (6 if operation == b"HMSG" else 5)
            reply = tokens[3] if has_reply else b""
            headers = bytes(buffer[start : start + header_size]) if operation == b"HMSG" else None
            sink(tokens[1], reply, bytes(buffer[start + header_size : end]), headers)
            position = end + 2
        return position, True


class SinkSubscription:
    """Handle of a sink subscription; ``close()`` unsubscribes it."""

    def __init__(self, client: LeanClient, subscription: Subscription) -> None:
        self._client = client
        self._subscription = subscription

    async def close(self) -> None:
        self._client._sinks.pop(self._subscription._id, None)
        if not self._client.is_closed:
            await self._subscription.unsubscribe()


def status_of(headers: bytes | None) -> bytes | None:
    """The 3-digit status code of a server status message (``NATS/1.0 404 ...``), else None."""
    if headers is None or not headers.startswith(_STATUS_PREFIX):
        return None
    return headers[9:12]


class AckInfo(NamedTuple):
    """What a JetStream reply subject (``$JS.ACK....``) tells about a delivered message (a
    named tuple: one is parsed per message consumed)."""

    stream: str
    consumer: str
    num_delivered: int
    stream_sequence: int
    consumer_sequence: int
    timestamp_ns: int
    num_pending: int
    """Messages the consumer still had to deliver after this one."""


_NAMES: dict[tuple[bytes, bytes], tuple[str, str]] = {}
"""Decoded (stream, consumer) of the reply subjects seen: a handful per process."""
_MAX_NAMES = 1024


def parse_ack_subject(reply: bytes) -> AckInfo:
    """Parse both reply formats: v1 ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.
    <ts>.<pending>`` and v2, which inserts domain and account hash after ``ACK`` and may append a
    token. ``ValueError`` for anything else (a message that did not come from a consumer)."""
    tokens = reply.split(b".")
    if len(tokens) == 9:
        offset = 2
    elif len(tokens) >= 11:
        offset = 4
    else:
        raise ValueError(f"not a JetStream reply subject: {reply!r}")
    if tokens[0] != b"$JS" or tokens[1] != b"ACK":
        raise ValueError(f"not a JetStream reply subject: {reply!r}")
    key = (tokens[offset], tokens[offset + 1])
    names = _NAMES.get(key)
    if names is None:
        if len(_NAMES) >= _MAX_NAMES:
            _NAMES.clear()
        names = _NAMES[key] = (key[0].decode(), key[1].decode())
    return AckInfo(
        names[0],
        names[1],
        int(tokens[offset + 2]),
        int(tokens[offset + 3]),
        int(tokens[offset + 4]),
        int(tokens[offset + 5]),
        int(tokens[offset + 6]),
    )
