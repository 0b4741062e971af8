"""The event bus: the only Heddle code that imports ``nats``.

Connect::

    async with Bus(settings) as bus:          # settings: heddle.config.Settings
        ...

With ``settings.nats_url`` unset, the bus joins the data dir's embedded ``nats-server``
(``<data_dir>/nats.json``) or starts one (store: ``settings.nats_store_dir``); the process that
started it stops it on close. Start provisions the streams idempotently (``HEDDLE_EVENTS``:
``heddle.evt.>``; ``HEDDLE_CMDS``: ``heddle.cmd.worker.>``; ``HEDDLE_TOOLS``: ``heddle.cmd.tool.>``
with work-queue retention, see ``heddle.bus.streams`` for why tools have their own stream).

Publish (subject from ``heddle.events.subjects``, ``Nats-Msg-Id`` = event_id / command_id, so a
retry or a re-processing consumer never stores a message twice)::

    ack = await bus.publish(event_or_command)     # PublishAck(stream, sequence, duplicate)
    acks = await bus.publish_many(messages)       # bounded window in flight, retries, in order
                                                  # (a Forward: stored bytes passed on as they are)
    await bus.publish_raw(subject, data, msg_id)  # bytes as they are
    await bus.publish_telemetry(telemetry)        # core NATS, best effort
    sub = await bus.subscribe_telemetry(handler, worker_id="*");  await sub.close()

Consume with a durable pull consumer (``ConsumerSpec``: durable, stream, filter subjects, the
role reading it, batch size, max_ack_pending, ack_wait, nak delay, ack_all, start_sequence)::

    async def project(batch: list[Delivery[EventT]]) -> list[Rejection] | None: ...
    runner = bus.batch_runner(spec, decode_event, project)     # batches in stream order
    runner = bus.message_runner(spec, decode_tool_call, handle, max_concurrent=32)
    await runner.run()                   # until runner.stop(); run(until_idle=True) drains
    runner.stats                         # fetched, acked, dead-lettered, retried

A handler raises ``TransientError`` to have its messages redelivered later, rejects a message
(``Rejection`` in a batch handler's result, ``InvalidMessage`` from a message handler) to
dead-letter it; undecodable messages are dead-lettered by the runner (``DeadLettered`` on
``heddle.evt.deadletter.<role>``, the consumer spec's role, then ``term``). Messages are acked
after the handler returns.
``Delivery`` carries the decoded message, subject, stream sequence, num_delivered, num_pending.

Replay (ordered, stops when caught up)::

    reader = bus.replay(ReplayQuery(filter_subjects=rollout_filter(rollout_id), start_sequence=1))
    async for record in reader:          # ReplayRecord(stream_sequence, subject, message)
        ...
    async for batch in reader.batches(): # lists of records, for bulk work

Blobs (chunked object store, bucket ``heddle-kv``)::

    await bus.put_object(key, data)
    data = await bus.get_object(key)     # ObjectNotFound when absent
    await bus.delete_object(key)

More streams: ``await bus.provision_stream(StreamSpec(...))`` (a trainer's delivery stream).

State: ``await bus.stream_state()``, ``await bus.consumer_state(stream, durable)``,
``await bus.delete_consumer(stream, durable)``.

Connection (``heddle.bus.connection``): credentials from ``settings.nats_creds`` or the URL, TLS
with ``settings.nats_tls_ca``; streams and buckets get ``bus.num_replicas`` replicas (1 on one
server, 3 on a cluster, unless set), and an existing stream with another count is an error
(``ReplicasMismatch``). A publish the server refuses for permissions raises ``PublishDenied``.

Modules: ``bus`` (``Bus``), ``dial`` (opening its connection, ``BusOptions``), ``connection``
(credentials, TLS, permission errors, replica count), ``wire`` (nats-py with a lean delivery path
for busy inboxes), ``streams`` (the streams and idempotent provisioning of streams and durables),
``state`` (stream and consumer state queries), ``publisher`` (de-duplicated publishing, bounded
windows, retries), ``outbox`` (each message on its subject, large arrays offloaded), ``payloads``
(moving an event's biggest arrays, found by field path, to the object store), ``objects`` (blobs on
the JetStream object store), ``positions`` (consumer positions kept apart from the durables, to
recreate a lost one), ``purge`` (purging a subject's messages, listing streams, consumers and bucket
objects: the data lifecycle's clean-up), ``snapshots`` (ledger snapshots kept in the object store),
``telemetry`` (best-effort core NATS load reports and heartbeats), ``runner`` (the pull-consumer
runner contract), ``batch_runner`` (``BatchRunner``: one handler call per batch), ``message_runner``
(``MessageRunner``: one call per message, bounded concurrency), ``pipelined_runner``
(``PipelinedRunner``: the control plane's deciders, batches decided in stages while earlier ones are
stored, acknowledged in order), ``pull`` (pull requests and the inbox buffering them), ``delivery``
(what a handler receives and how it reports failure), ``transient`` (JetStream API errors that pass,
e.g. during leader elections), ``replay`` (ordered replay of a stream), ``micro`` (NATS micro
services and their clients), ``embedded`` (the one ``nats-server`` shared by a data dir's
processes), ``server`` (an embedded ``nats-server`` on a free loopback port), ``store_health``
(whether its JetStream store takes writes, and the reset of one a full disk wedged), ``cluster`` (a
loopback JetStream cluster, for tests and ``heddle bench cluster``).
"""

from heddle.bus.batch_runner import BatchRunner
from heddle.bus.bus import Bus
from heddle.bus.connection import PermissionDenied
from heddle.bus.delivery import (
    BatchHandler,
    Decoder,
    Delivery,
    InvalidMessage,
    MessageHandler,
    Rejection,
    TransientError,
)
from heddle.bus.dial import BusOptions, BusUnavailable
from heddle.bus.message_runner import MessageRunner
from heddle.bus.objects import KV_BUCKET, PAYLOADS_BUCKET, ObjectNotFound
from heddle.bus.outbox import Forward, Outgoing, Rerouted
from heddle.bus.payloads import PayloadError
from heddle.bus.pipelined_runner import ConsumerFailed, DurableLost, PipelinedRunner, Stage
from heddle.bus.publisher import PublishAck, PublishDenied, PublishError, PublishOptions
from heddle.bus.replay import ReplayQuery, ReplayReader, ReplayRecord
from heddle.bus.runner import ConsumerLost, RunnerStats
from heddle.bus.server import EmbeddedNatsServer, NatsServerNotFound
from heddle.bus.state import ConsumerState, StreamState
from heddle.bus.streams import ConsumerSpec, ReplicasMismatch, StreamSpec
from heddle.bus.telemetry import TelemetrySubscription

__all__ = [
    "KV_BUCKET",
    "PAYLOADS_BUCKET",
    "BatchHandler",
    "BatchRunner",
    "Bus",
    "BusOptions",
    "BusUnavailable",
    "ConsumerFailed",
    "ConsumerLost",
    "ConsumerSpec",
    "ConsumerState",
    "Decoder",
    "Delivery",
    "DurableLost",
    "EmbeddedNatsServer",
    "Forward",
    "InvalidMessage",
    "MessageHandler",
    "MessageRunner",
    "NatsServerNotFound",
    "ObjectNotFound",
    "Outgoing",
    "PayloadError",
    "PermissionDenied",
    "PipelinedRunner",
    "PublishAck",
    "PublishDenied",
    "PublishError",
    "PublishOptions",
    "Rejection",
    "ReplayQuery",
    "ReplayReader",
    "ReplayRecord",
    "ReplicasMismatch",
    "Rerouted",
    "RunnerStats",
    "Stage",
    "StreamSpec",
    "StreamState",
    "TelemetrySubscription",
    "TransientError",
]
