"""``Bus``: one connection to NATS and everything Heddle does over it (see the package doc)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TypeVar

import nats.errors
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from heddle.bus.batch_runner import BatchRunner
from heddle.bus.connection import (
    PermissionDenied,
    Violation,
    connect_options,
    describe_error,
    parse_violation,
    replicas_for,
)
from heddle.bus.delivery import BatchHandler, Decoder, MessageHandler
from heddle.bus.embedded import SharedServer, acquire_embedded_server, release_embedded_server
from heddle.bus.message_runner import MessageRunner
from heddle.bus.objects import KV_BUCKET, PAYLOADS_BUCKET, Objects
from heddle.bus.payloads import offload, payload_prefix, resolve
from heddle.bus.publisher import PublishAck, Publisher, PublishOptions
from heddle.bus.replay import ReplayQuery, ReplayReader
from heddle.bus.streams import HEDDLE_STREAMS, ConsumerSpec, provision_stream
from heddle.bus.telemetry import (
    HeartbeatHandler,
    TelemetryHandler,
    TelemetrySubscription,
    publish_telemetry,
    subscribe_heartbeats,
)
from heddle.bus.transient import retry_transient
from heddle.bus.wire import LeanClient
from heddle.config import Settings
from heddle.errors import UserError
from heddle.events import (
    Event,
    EventT,
    ToolCall,
    WorkerCommand,
    WorkerHeartbeat,
    WorkerTelemetry,
    decode_event,
    encode,
)
from heddle.events.subjects import EVENTS_STREAM, subject_for_command, subject_for_event

T = TypeVar("T")
M = TypeVar("M", bound=Event | WorkerCommand | ToolCall)
log = logging.getLogger(__name__)

_INITIAL_CONNECT_ATTEMPTS = 2
_PUBLISH_CHUNK = 4096
"""Messages encoded ahead of the publisher's window (offloading an array awaits the store)."""


class BusUnavailable(UserError):
    """NATS could not be reached (the message names the URL)."""


@dataclass(frozen=True, slots=True)
class BusOptions:
    """How a ``Bus`` connects and what it provisions."""

    name: str = "heddle"
    """Connection name shown by ``nats server report connections``."""
    num_replicas: int | None = None
    """Replicas of the streams and buckets this bus creates; None: ``Settings.nats_replicas``,
    else what the server suggests (1 on one server, 3 on a cluster)."""
    provision: bool = True
    """Create or update Heddle's streams on start."""
    connect_timeout_s: float = 5.0
    reconnect_wait_s: float = 0.5
    max_reconnect_attempts: int = -1
    """-1: keep reconnecting forever (a restarting server is waited for)."""
    publish: PublishOptions = field(default_factory=PublishOptions)
    payload_max_age_s: float = 7 * 24 * 3600.0
    """How long bucket ``heddle-payloads`` keeps an offloaded array (``heddle.bus.payloads``);
    applies when the bucket is created."""


@dataclass(frozen=True, slots=True)
class StreamState:
    num_messages: int
    first_sequence: int
    last_sequence: int
    num_bytes: int


@dataclass(frozen=True, slots=True)
class ConsumerState:
    num_pending: int
    """Messages not yet delivered."""
    num_ack_pending: int
    """Delivered, not yet acknowledged."""
    delivered_sequence: int
    """Stream sequence of the last delivered message."""
    ack_floor_sequence: int
    """Stream sequence up to which everything is acknowledged."""
    num_waiting: int = 0
    """Pull requests waiting for messages (consumers idle and ready to take work)."""


class Bus:
    """A connection to NATS (configured, or the data dir's embedded server) with Heddle's
    streams provisioned. ``async with Bus(settings) as bus: ...``."""

    def __init__(self, settings: Settings, options: BusOptions | None = None) -> None:
        self.settings = settings
        self.options = options or BusOptions()
        self._shared: SharedServer | None = None
        self._client: LeanClient | None = None
        self._js: JetStreamContext | None = None
        self._publisher: Publisher | None = None
        self._objects: Objects | None = None
        self._payloads: Objects | None = None
        self._is_closing = False
        self.num_replicas = 1
        """Replicas of what this bus creates (resolved on start)."""
        self._replicas_source = ""
        self._last_error: Exception | None = None
        self._tls_refused = asyncio.Event()
        self.violations: list[Violation] = []
        """Permission violations the server reported on this connection (newest last)."""

    async def __aenter__(self) -> Bus:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def url(self) -> str:
        if self._client is None or self._client.connected_url is None:
            raise RuntimeError("the bus is not connected")
        return self._client.connected_url.geturl()

    @property
    def client(self) -> LeanClient:
        if self._client is None:
            raise RuntimeError("the bus is not started")
        return self._client

    @property
    def js(self) -> JetStreamContext:
        if self._js is None:
            raise RuntimeError("the bus is not started")
        return self._js

    async def start(self) -> None:
        """Connect (starting or joining the embedded server if no URL is set) and provision."""
        self._is_closing = False
        url = self.settings.nats_url
        if url is None:
            self._shared = await asyncio.to_thread(
                acquire_embedded_server, self.settings.data_dir, self.settings.nats_store_dir
            )
            url = self._shared.url
        try:
            self._client = await self._connect(url)
            self._js = self._client.jetstream()
            self.num_replicas, self._replicas_source = self._resolve_replicas(self._client)
            if self.options.provision:
                await self.provision()
            self._publisher = await Publisher(self._client, self.options.publish).open()
            self._objects = Objects(self._js, KV_BUCKET, self.num_replicas)
            self._payloads = Objects(
                self._js, PAYLOADS_BUCKET, self.num_replicas, self.options.payload_max_age_s
            )
        except BaseException:
            await self.close()
            raise

    @property
    def num_resent(self) -> int:
        """Publishes sent again with the same id after a timeout or refusal (diagnostics)."""
        return self._publisher.num_resent if self._publisher is not None else 0

    def _resolve_replicas(self, client: LeanClient) -> tuple[int, str]:
        if self.options.num_replicas is not None:
            return self.options.num_replicas, "asked by this process"
        if self.settings.nats_replicas is not None:
            return self.settings.nats_replicas, "from --nats-replicas / HEDDLE_NATS_REPLICAS"
        suggested = replicas_for(client._server_info)
        where = "a cluster" if suggested > 1 else "a single server"
        return suggested, f"the default on {where}"

    async def _connect(self, url: str) -> LeanClient:
        client = LeanClient()
        servers = [part.strip() for part in url.split(",") if part.strip()]
        # nats-py retries a first connection forever when reconnects are unlimited: connect
        # with a few attempts, then switch to the configured reconnect policy. It also never
        # returns from a failed TLS handshake: bound the whole attempt.
        connect_timeout_s = max(1, self.options.connect_timeout_s)
        bound_s = (
            (connect_timeout_s + self.options.reconnect_wait_s)
            * (_INITIAL_CONNECT_ATTEMPTS + 1)
            * max(1, len(servers))
        )
        self._tls_refused = asyncio.Event()
        try:
            await _first_of(
                client.connect(
                    servers,
                    name=self.options.name,
                    connect_timeout=int(connect_timeout_s),
                    reconnect_time_wait=self.options.reconnect_wait_s,  # type: ignore[arg-type]
                    max_reconnect_attempts=_INITIAL_CONNECT_ATTEMPTS,
                    allow_reconnect=True,
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=_log_reconnected,
                    **connect_options(self.settings),
                ),
                self._tls_refused,
                bound_s,
            )
        except (OSError, nats.errors.Error, TimeoutError) as exc:
            # nats-py reports why a server refused (authorization, TLS) to the error callback
            # and raises NoServersError: name the reason.
            with contextlib.suppress(Exception):
                await client.close()
            reason = describe_error(self._last_error or exc)
            where = _without_password(url)
            raise BusUnavailable(f"cannot reach NATS at {where}: {reason}") from None
        client.options["max_reconnect_attempts"] = self.options.max_reconnect_attempts
        return client

    async def _on_error(self, exc: Exception) -> None:
        self._last_error = exc
        if isinstance(exc, ssl.SSLError):
            self._tls_refused.set()
        violation = parse_violation(str(exc))
        if violation is not None:
            self.violations = [*self.violations[-99:], violation]
            log.error("%s", violation.message())
            if violation.operation == "publish" and self._publisher is not None:
                self._publisher.deny(violation.subject, violation.message())
            return
        if not self._is_closing:
            log.warning("nats: %r", exc)

    async def _on_disconnected(self) -> None:
        if not self._is_closing:
            log.warning(
                "nats: disconnected from %s; reconnecting",
                self.settings.nats_url or "embedded server",
            )

    async def close(self) -> None:
        """Drain the connection, then stop the embedded server if this process started it."""
        self._is_closing = True
        if self._publisher is not None:
            await self._publisher.close()
            self._publisher = None
        client, self._client = self._client, None
        if client is not None and not client.is_closed:
            try:
                await client.drain()
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning("draining the NATS connection failed: %r", exc)
                await client.close()
        shared, self._shared = self._shared, None
        if shared is not None:
            await asyncio.to_thread(release_embedded_server, shared)

    async def provision(self) -> None:
        """Create or update ``HEDDLE_EVENTS``, ``HEDDLE_CMDS`` and ``HEDDLE_TOOLS``."""
        for spec in HEDDLE_STREAMS:
            try:
                await provision_stream(self.js, spec, self.num_replicas, self._replicas_source)
            except TimeoutError:
                if self.violations:
                    raise PermissionDenied(
                        f"cannot provision stream {spec.name}: "
                        f"{self.violations[-1].message()}; start a process whose role may "
                        "create streams (the control plane, `heddle up`) first"
                    ) from None
                raise

    # ---- publishing -----------------------------------------------------------------------

    async def publish(self, message: Event | WorkerCommand | ToolCall) -> PublishAck:
        """Publish an event or a command on its subject, de-duplicated by its id (its largest
        arrays in the object store if it is too large: ``heddle.bus.payloads``)."""
        return await self._require_publisher().publish(*await self._envelope(message))

    async def publish_many(
        self, messages: Iterable[Event | WorkerCommand | ToolCall]
    ) -> list[PublishAck]:
        """Publish many messages with a bounded window in flight; acks in input order."""
        publisher = self._require_publisher()
        acks: list[PublishAck] = []
        chunk: list[tuple[str, bytes, str]] = []
        for message in messages:
            chunk.append(await self._envelope(message))
            if len(chunk) >= _PUBLISH_CHUNK:
                acks += await publisher.publish_many(chunk)
                chunk = []
        if chunk:
            acks += await publisher.publish_many(chunk)
        return acks

    async def _envelope(self, message: Event | WorkerCommand | ToolCall) -> tuple[str, bytes, str]:
        subject, data, message_id = _envelope(message)
        if len(data) > self.settings.max_event_bytes:
            data = await offload(
                message,
                data,
                message_id=message_id,
                max_bytes=self.settings.max_event_bytes,
                bucket=PAYLOADS_BUCKET,
                put=self._require_payloads().put,
            )
        return subject, data, message_id

    async def resolve(self, message: M) -> M:
        """``message`` with the arrays it keeps in the object store read back (digests
        checked, ``heddle.bus.PayloadError`` on a mismatch); itself when it has none."""
        return await resolve(message, self._get_payload)

    async def _get_payload(self, bucket: str, name: str) -> bytes:
        payloads = self._require_payloads()
        store = payloads if bucket == payloads.bucket else Objects(self.js, bucket)
        return await store.get(name)

    async def payload_bytes(self) -> int:
        """Bytes stored in bucket ``heddle-payloads`` (its stream; 0 before the first object)."""
        try:
            return (await self.stream_state(f"OBJ_{PAYLOADS_BUCKET}")).num_bytes
        except NotFoundError:
            return 0

    async def delete_payloads(self, rollout_id: str) -> int:
        """Delete the offloaded arrays of a rollout's events; how many objects there were."""
        payloads = self._require_payloads()
        names = await payloads.names(payload_prefix(rollout_id))
        for name in names:
            await payloads.delete(name)
        return len(names)

    async def publish_raw(self, subject: str, data: bytes, msg_id: str | None = None) -> PublishAck:
        """Publish bytes as they are (operators' tools and tests of bad input)."""
        return await self._require_publisher().publish(subject, data, msg_id)

    def _require_publisher(self) -> Publisher:
        if self._publisher is None:
            raise RuntimeError("the bus is not started")
        return self._publisher

    async def publish_telemetry(self, telemetry: WorkerTelemetry | WorkerHeartbeat) -> None:
        """Best effort on core NATS, not stored: a load report or a heartbeat."""
        await publish_telemetry(self.client, telemetry)

    async def subscribe_heartbeats(self, handler: HeartbeatHandler) -> Subscription:
        """Every worker's heartbeats as they arrive (``unsubscribe()`` the result to stop)."""
        return await subscribe_heartbeats(self.client, handler)

    async def subscribe_telemetry(
        self, handler: TelemetryHandler, worker_id: str = "*"
    ) -> TelemetrySubscription:
        """Call ``handler`` for each telemetry report (of one worker, or all); ``close()`` the
        returned subscription to stop."""
        return await TelemetrySubscription(handler).open(self.client, worker_id)

    # ---- consuming ------------------------------------------------------------------------

    def batch_runner(
        self, spec: ConsumerSpec, decode: Decoder[T], handler: BatchHandler[T]
    ) -> BatchRunner[T]:
        """A runner handing fetched batches to ``handler`` (see ``heddle.bus.runner``)."""
        return BatchRunner(self.client, self.js, spec, decode, handler, self.publish)

    def message_runner(
        self,
        spec: ConsumerSpec,
        decode: Decoder[T],
        handler: MessageHandler[T],
        *,
        max_concurrent: int = 16,
    ) -> MessageRunner[T]:
        """A runner calling ``handler`` per message, concurrently (see ``heddle.bus.runner``)."""
        return MessageRunner(
            self.client,
            self.js,
            spec,
            decode,
            handler,
            self.publish,
            max_concurrent=max_concurrent,
        )

    def replay(
        self,
        query: ReplayQuery,
        decode: Decoder[T] = decode_event,  # type: ignore[assignment]
        stream: str = EVENTS_STREAM,
    ) -> ReplayReader[T]:
        """An ordered reader of ``stream`` (default: events, decoded as ``EventT``)."""
        return ReplayReader(self.client, self.js, stream, query, decode)

    def replay_events(self, query: ReplayQuery) -> ReplayReader[EventT]:
        return ReplayReader(self.client, self.js, EVENTS_STREAM, query, decode_event)

    async def stream_state(self, stream: str = EVENTS_STREAM) -> StreamState:
        """The stream's counts (asked again while a cluster elects its leader)."""
        info = await retry_transient(lambda: self.js.stream_info(stream), f"stream {stream}")
        state = info.state
        return StreamState(state.messages, state.first_seq, state.last_seq, state.bytes)

    async def num_subject_messages(self, stream: str, subject: str) -> int:
        """How many messages ``stream`` holds on ``subject`` (no wildcards)."""
        info = await self.js.stream_info(stream, subjects_filter=subject)
        return int((info.state.subjects or {}).get(subject, 0))

    async def stream_message(self, stream: str, sequence: int) -> tuple[str, bytes] | None:
        """The subject and payload stored at ``sequence``; None when no message is there
        (deleted, expired, or never written)."""
        try:
            message = await self.js.get_msg(stream, sequence)
        except NotFoundError:
            return None
        return message.subject or "", message.data or b""

    async def consumer_state(self, stream: str, durable: str) -> ConsumerState | None:
        """The durable's progress, or None when it does not exist (asked again while a cluster
        elects its leader)."""
        try:
            info = await retry_transient(
                lambda: self.js.consumer_info(stream, durable), f"consumer {durable}"
            )
        except NotFoundError:
            return None
        return ConsumerState(
            num_pending=info.num_pending or 0,
            num_ack_pending=info.num_ack_pending or 0,
            delivered_sequence=(info.delivered.stream_seq or 0) if info.delivered else 0,
            ack_floor_sequence=(info.ack_floor.stream_seq or 0) if info.ack_floor else 0,
            num_waiting=info.num_waiting or 0,
        )

    async def delete_consumer(self, stream: str, durable: str) -> bool:
        """Delete a durable consumer; False when it did not exist."""
        try:
            await self.js.delete_consumer(stream, durable)
        except NotFoundError:
            return False
        return True

    # ---- objects --------------------------------------------------------------------------

    async def put_object(self, key: str, data: bytes) -> int:
        """Store a blob (KV cache export) under ``key`` in bucket ``heddle-kv``; its size."""
        return await self._require_objects().put(key, data)

    async def get_object(self, key: str) -> bytes:
        """The blob under ``key``; ``heddle.bus.ObjectNotFound`` when absent."""
        return await self._require_objects().get(key)

    async def delete_object(self, key: str) -> None:
        await self._require_objects().delete(key)

    async def put_bucket_object(self, bucket: str, name: str, data: bytes) -> int:
        """Store ``data`` as ``name`` in object-store bucket ``bucket`` (created on first use:
        published weights, ``heddle.events.weights``); its size."""
        return await Objects(self.js, bucket).put(name, data)

    async def get_bucket_object(self, bucket: str, name: str) -> bytes:
        """The object ``name`` of ``bucket``; ``heddle.bus.ObjectNotFound`` when absent."""
        return await Objects(self.js, bucket).get(name)

    def _require_payloads(self) -> Objects:
        if self._payloads is None:
            raise RuntimeError("the bus is not started")
        return self._payloads

    def _require_objects(self) -> Objects:
        if self._objects is None:
            raise RuntimeError("the bus is not started")
        return self._objects


def _envelope(message: Event | WorkerCommand | ToolCall) -> tuple[str, bytes, str]:
    if isinstance(message, Event):
        return subject_for_event(message), encode(message), message.event_id
    return subject_for_command(message), encode(message), message.command_id


async def _log_reconnected() -> None:
    log.info("nats: reconnected")


def _without_password(url: str) -> str:
    """``url`` with any password in it masked (for messages and logs)."""
    return re.sub(r"(://[^:/@,]+:)[^@/,]+@", r"\1***@", url)


async def _first_of(connecting: Awaitable[None], refused: asyncio.Event, timeout_s: float) -> None:
    """Await ``connecting``; ``TimeoutError`` after ``timeout_s`` or as soon as ``refused`` is
    set (a failed TLS handshake, after which nats-py would wait forever)."""
    task = asyncio.ensure_future(connecting)
    waiter = asyncio.ensure_future(refused.wait())
    try:
        done, _ = await asyncio.wait(
            {task, waiter}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        waiter.cancel()
    if task in done:
        task.result()
        return
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    raise TimeoutError("connection refused" if refused.is_set() else "connection timed out")
