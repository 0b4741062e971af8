"""``Bus``: one connection to NATS and everything Heddle does over it (see the package doc)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from types import TracebackType
from typing import TypeVar

import nats.errors
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from heddle.bus import state
from heddle.bus.batch_runner import BatchRunner
from heddle.bus.connection import Violation
from heddle.bus.delivery import BatchHandler, Decoder, MessageHandler
from heddle.bus.dial import BusOptions, Dialer
from heddle.bus.embedded import SharedServer, acquire_embedded_server, release_embedded_server
from heddle.bus.message_runner import MessageRunner
from heddle.bus.objects import KV_BUCKET, PAYLOADS_BUCKET, Objects
from heddle.bus.outbox import Outbox, Outgoing
from heddle.bus.pipelined_runner import BeforePublish, Decide, OnStored, PipelinedRunner
from heddle.bus.positions import Positions
from heddle.bus.publisher import PublishAck, Publisher
from heddle.bus.replay import ReplayQuery, ReplayReader
from heddle.bus.state import ConsumerState, StreamState
from heddle.bus.streams import ConsumerSpec, StreamSpec, provision_stream, provision_streams
from heddle.bus.telemetry import (
    HeartbeatHandler,
    TelemetryHandler,
    TelemetrySubscription,
    publish_telemetry,
    subscribe_heartbeats,
)
from heddle.bus.wire import LeanClient
from heddle.config import Settings
from heddle.events import (
    Event,
    EventT,
    ToolCall,
    WorkerCommand,
    WorkerHeartbeat,
    WorkerTelemetry,
    decode_event,
)
from heddle.events.subjects import EVENTS_STREAM

T = TypeVar("T")
M = TypeVar("M", bound=Event | WorkerCommand | ToolCall)
log = logging.getLogger(__name__)


class Bus:
    """A connection to NATS (configured, or the data dir's embedded server) with Heddle's
    streams provisioned. ``async with Bus(settings) as bus: ...``."""

    def __init__(self, settings: Settings, options: BusOptions | None = None) -> None:
        self.settings = settings
        self.options = options or BusOptions()
        self._shared: SharedServer | None = None
        self._client: LeanClient | None = None
        self._js: JetStreamContext | None = None
        self._outbox: Outbox | None = None
        self._objects: Objects | None = None
        self._positions: Positions | None = None
        self.num_replicas = 1
        """Replicas of what this bus creates (resolved on start)."""
        self._replicas_source = ""
        self._dialer = Dialer(settings, self.options, self._deny_publishes)

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
        self._dialer.is_closing = False
        url = self.settings.nats_url
        if url is None:
            self._shared = await asyncio.to_thread(
                acquire_embedded_server, self.settings.data_dir, self.settings.nats_store_dir
            )
            url = self._shared.url
        try:
            self._client = await self._dialer.connect(url)
            self._js = self._client.jetstream()
            self.num_replicas, self._replicas_source = self._dialer.replicas(self._client)
            if self.options.provision:
                await self.provision()
            self._objects = Objects(self._js, KV_BUCKET, self.num_replicas)
            self._positions = Positions(self._js, self.num_replicas)
            payloads = Objects(
                self._js, PAYLOADS_BUCKET, self.num_replicas, self.options.payload_max_age_s
            )
            publisher = await Publisher(self._client, self.options.publish).open()
            self._outbox = Outbox(self._js, publisher, payloads, self.settings.max_event_bytes)
        except BaseException:
            await self.close()
            raise

    @property
    def num_resent(self) -> int:
        """Publishes sent again with the same id after a timeout or refusal (diagnostics)."""
        return self._outbox.publisher.num_resent if self._outbox is not None else 0

    @property
    def reconnected_at_s(self) -> float:
        """Wall-clock time this connection last came back after a loss (-inf: never lost)."""
        return self._dialer.reconnected_at_s

    @property
    def is_connection_lost(self) -> bool:
        """The connection is down, or coming back (its subscriptions not yet restored)."""
        return self._dialer.is_connection_lost

    def hold_publishes(self, is_held: bool) -> None:
        """While held, an unacknowledged publish is sent again past its retry deadline instead
        of failing (the caller knows the stream refuses writes for now: a full disk)."""
        self._require_outbox().publisher.is_held = is_held

    def unacknowledged_s(self) -> float:
        """How long this connection's oldest unacknowledged publish has waited (0.0: none)."""
        return self._outbox.publisher.unacknowledged_s() if self._outbox is not None else 0.0

    @property
    def violations(self) -> list[Violation]:
        """Permission violations the server reported on this connection (newest last)."""
        return self._dialer.violations

    def _deny_publishes(self, subject: str, message: str) -> None:
        if self._outbox is not None:
            self._outbox.publisher.deny(subject, message)

    async def close(self) -> None:
        """Drain the connection, then stop the embedded server if this process started it."""
        self._dialer.is_closing = True
        outbox, self._outbox = self._outbox, None
        if outbox is not None:
            await outbox.publisher.close()
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
        await provision_streams(self.js, self.num_replicas, self._replicas_source, self.violations)

    async def provision_stream(self, spec: StreamSpec) -> None:
        """Create or update one more stream (a trainer's delivery stream), replicated like the
        others."""
        await provision_stream(self.js, spec, self.num_replicas, self._replicas_source)

    # ---- publishing -----------------------------------------------------------------------

    async def publish(self, message: Event | WorkerCommand | ToolCall) -> PublishAck:
        """Publish an event or a command on its subject, de-duplicated by its id (its largest
        arrays in the object store if it is too large: ``heddle.bus.payloads``)."""
        return await self._require_outbox().publish(message)

    async def publish_many(self, messages: Iterable[Outgoing]) -> list[PublishAck]:
        """Publish many messages with a bounded window in flight; acks in input order
        (``Forward``: stored bytes passed on as they are)."""
        return await self._require_outbox().publish_many(messages)

    async def resolve(self, message: M) -> M:
        """``message`` with the arrays it keeps in the object store read back (digests
        checked, ``heddle.bus.PayloadError`` on a mismatch); itself when it has none."""
        return await self._require_outbox().resolve(message)

    async def payload_bytes(self) -> int:
        """Bytes stored in bucket ``heddle-payloads`` (its stream; 0 before the first object)."""
        return await self._require_outbox().payload_bytes()

    async def delete_payloads(self, rollout_id: str) -> int:
        """Delete the offloaded arrays of a rollout's events; how many objects there were."""
        return await self._require_outbox().delete_payloads(rollout_id)

    async def publish_raw(self, subject: str, data: bytes, msg_id: str | None = None) -> PublishAck:
        """Publish bytes as they are (operators' tools and tests of bad input)."""
        return await self._require_outbox().publisher.publish(subject, data, msg_id)

    def _require_outbox(self) -> Outbox:
        if self._outbox is None:
            raise RuntimeError("the bus is not started")
        return self._outbox

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

    def pipelined_runner(
        self,
        spec: ConsumerSpec,
        decode: Decoder[T],
        decide: Decide[T],
        *,
        on_stored: OnStored | None = None,
        before_publish: BeforePublish | None = None,
    ) -> PipelinedRunner[T]:
        """A runner deciding batches in stages and acknowledging them in order once their
        outputs are stored (see ``heddle.bus.pipelined_runner``)."""
        return PipelinedRunner(
            self.client, self.js, spec, decode, decide, self.publish_many, self.publish,
            on_stored=on_stored, before_publish=before_publish,
        )  # fmt: skip

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
        return await state.stream_state(self.js, stream)

    async def has_stream(self, stream: str) -> bool:
        """Whether ``stream`` exists."""
        return await state.has_stream(self.js, stream)

    async def num_subject_messages(self, stream: str, subject: str) -> int:
        """How many messages ``stream`` holds on ``subject`` (no wildcards)."""
        return await state.num_subject_messages(self.js, stream, subject)

    async def num_matching_messages(self, stream: str, subjects: str) -> int:
        """How many messages ``stream`` holds on the subjects ``subjects`` matches."""
        return await state.num_matching_messages(self.js, stream, subjects)

    async def last_subject_message(self, stream: str, subject: str) -> tuple[int, bytes] | None:
        """(sequence, payload) of the last message on ``subject`` (no wildcards); None if none."""
        return await state.last_subject_message(self.js, stream, subject)

    async def stream_message(self, stream: str, sequence: int) -> tuple[str, bytes] | None:
        """The subject and payload stored at ``sequence``; None when no message is there
        (deleted, expired, or never written)."""
        return await state.stream_message(self.js, stream, sequence)

    async def consumer_state(self, stream: str, durable: str) -> ConsumerState | None:
        """The durable's progress, or None when it does not exist (asked again while a cluster
        elects its leader)."""
        return await state.consumer_state(self.js, stream, durable)

    async def delete_consumer(self, stream: str, durable: str) -> bool:
        """Delete a durable consumer; False when it did not exist."""
        return await state.delete_consumer(self.js, stream, durable)

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

    @property
    def positions(self) -> Positions:
        """Consumer positions recorded apart from their durables (``heddle.bus.positions``)."""
        if self._positions is None:
            raise RuntimeError("the bus is not started")
        return self._positions

    async def put_expiring_object(
        self, bucket: str, name: str, data: bytes, max_age_s: float
    ) -> int:
        """``put_bucket_object`` into a bucket that keeps objects ``max_age_s`` (set when this
        creates it, with this bus's replicas)."""
        return await Objects(self.js, bucket, self.num_replicas, max_age_s).put(name, data)

    async def bucket_object_size(self, bucket: str, name: str) -> int:
        """The size of ``name`` in ``bucket`` (its metadata: nothing is read); ``ObjectNotFound``
        when absent."""
        return await Objects(self.js, bucket).size(name)

    async def bucket_object_names(self, bucket: str, prefix: str = "") -> list[str]:
        """Names of ``bucket``'s objects that start with ``prefix``."""
        return await Objects(self.js, bucket).names(prefix)

    async def delete_bucket_object(self, bucket: str, name: str) -> None:
        """Remove ``name`` from ``bucket``; ``heddle.bus.ObjectNotFound`` when absent."""
        await Objects(self.js, bucket).delete(name)

    def _require_objects(self) -> Objects:
        if self._objects is None:
            raise RuntimeError("the bus is not started")
        return self._objects
