"""The worker agent over ``heddle.bus``: its ports, its command consumer, and ``serve``.

Commands arrive through the durable pull consumer ``worker-<id>`` on
``heddle.cmd.worker.<id>.>`` (``MessageRunner``: one handler per command, concurrently, with
in-progress signals while a step runs, so that a live worker's commands are not redelivered).
A command is acknowledged when ``WorkerAgent.handle`` returns, i.e. after its events are stored.
After a crash, unacknowledged commands come back after ``command_ack_wait_s`` to whichever
incarnation of the worker runs then (``num_delivered > 1`` makes it rebuild from the stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from heddle.bus import (
    Bus,
    BusOptions,
    ConsumerSpec,
    Delivery,
    InvalidMessage,
    PublishOptions,
    ReplayQuery,
    TransientError,
)
from heddle.config import Settings
from heddle.events import (
    Event,
    EventT,
    MigrateIn,
    ToolCall,
    WorkerCommand,
    WorkerCommandT,
    WorkerHeartbeat,
    WorkerTelemetry,
    decode_worker_command,
)
from heddle.events.subjects import (
    COMMANDS_STREAM,
    trajectory_subject,
    worker_command_subject,
    worker_role,
)
from heddle.observability import Metrics, MetricsSink
from heddle.workers.agent.agent import WorkerAgent
from heddle.workers.agent.config import WorkerConfig
from heddle.workers.agent.errors import CommandRefused, WorkerFailing, WorkerStopping
from heddle.workers.agent.table import CommandArrival
from heddle.workers.engines.base import Engine

logger = logging.getLogger(__name__)


AGENT_PUBLISH = PublishOptions(retry_deadline_s=0.0)
"""The agents' bus makes one attempt per publish (a copy unacknowledged within its
``ack_timeout_s`` fails at once): the agent's ``DurablePublisher`` is the one retry policy, with
the same ids, until stored or the worker closes; a second loop beneath it would only delay
``close``."""


class BusPorts:
    """``MessageSink``, ``HistorySource`` and ``BlobStore`` of the agent over one ``Bus``."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def publish(self, message: Event | WorkerCommand | ToolCall) -> None:
        await self.bus.publish(message)

    async def publish_many(self, messages: Sequence[Event | WorkerCommand | ToolCall]) -> None:
        await self.bus.publish_many(messages)

    async def publish_telemetry(self, telemetry: WorkerTelemetry | WorkerHeartbeat) -> None:
        await self.bus.publish_telemetry(telemetry)

    async def trajectory_events(self, rollout_id: str, traj_id: str) -> list[EventT]:
        query = ReplayQuery(filter_subjects=(trajectory_subject(rollout_id, traj_id, ">"),))
        return [
            await self.bus.resolve(record.message) async for record in self.bus.replay_events(query)
        ]

    async def put_blob(self, key: str, data: bytes) -> None:
        await self.bus.put_object(key, data)

    async def get_blob(self, key: str) -> bytes:
        return await self.bus.get_object(key)

    async def delete_blob(self, key: str) -> None:
        await self.bus.delete_object(key)

    async def get_object(self, bucket: str, name: str) -> bytes:
        return await self.bus.get_bucket_object(bucket, name)


class ObservedPorts(MetricsSink):
    """The metrics sink of ``heddle.observability``, able to pipeline (``BatchSink``) like the
    ports it wraps: each event is observed once stored."""

    def __init__(self, inner: BusPorts, metrics: Metrics) -> None:
        super().__init__(inner, metrics)
        self.ports = inner

    async def publish_many(self, messages: Sequence[Event | WorkerCommand | ToolCall]) -> None:
        await self.ports.publish_many(messages)
        for message in messages:
            if isinstance(message, Event):
                self.metrics.observe_published(message)


def command_consumer(config: WorkerConfig) -> ConsumerSpec:
    """The worker's durable command consumer (survives restarts of the worker)."""
    return ConsumerSpec(
        durable=config.consumer_name,
        stream=COMMANDS_STREAM,
        filter_subjects=(worker_command_subject(config.worker_id, ">"),),
        role=worker_role(config.worker_id),
        batch_size=min(64, config.max_commands_in_flight),
        max_ack_pending=config.max_commands_in_flight,
        ack_wait_s=config.command_ack_wait_s,
        nak_delay_s=1.0,
    )


class CommandDispatcher:
    """The message handler of the worker's command consumer. A command whose arrays are in the
    object store (a long prompt or observation) is resolved before the agent sees it."""

    def __init__(self, agent: WorkerAgent, bus: Bus) -> None:
        self.agent = agent
        self.bus = bus

    async def __call__(self, delivery: Delivery[WorkerCommandT]) -> None:
        command = await self.bus.resolve(delivery.message)
        arrival = CommandArrival(
            stored_at=delivery.stored_at, received_at=time.time(), issued_at=command.issued_at
        )
        if command.worker_id != self.agent.worker_id:
            raise InvalidMessage(
                f"command for worker {command.worker_id!r} delivered to {self.agent.worker_id!r}"
            )
        if isinstance(command, MigrateIn) and command.sent_by != command.source_worker_id:
            # The subject's sender token is what the server vouches for (docs/deploy.md).
            raise InvalidMessage(
                f"hand-over from {command.source_worker_id!r} sent by {command.sent_by!r}"
            )
        try:
            await self.agent.handle(
                command, is_redelivered=delivery.num_delivered > 1, arrival=arrival
            )
        except WorkerStopping as exc:
            raise TransientError(str(exc)) from None  # nak: redelivered to the next incarnation
        except CommandRefused as exc:
            raise InvalidMessage(str(exc)) from None  # dead-lettered with the reason


async def serve(agent: WorkerAgent, bus: Bus, stop: asyncio.Event | None = None) -> None:
    """Start ``agent`` and feed it its commands until it fails (``WorkerFailing`` is raised),
    retires for a re-shard, or ``stop`` is set; then close it. The engine is closed too. A
    drained agent keeps serving (an ``Undrain`` makes it take trajectories again)."""
    stop = stop or asyncio.Event()
    runner = bus.message_runner(
        command_consumer(agent.config),
        decode_worker_command,
        CommandDispatcher(agent, bus),
        max_concurrent=agent.config.max_commands_in_flight,
    )
    # Watch from the start: a stop while the registration is still being retried (a lost
    # server) ends it too.
    watcher = asyncio.create_task(_stop_when_done(agent, runner.stop, stop))
    try:
        await agent.start()
        if not watcher.done():  # else it stopped the runner before it ran
            await runner.run()
    except WorkerStopping:
        if not stop.is_set():
            raise
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await agent.close()
    if agent.failed.is_set():
        raise WorkerFailing(f"worker {agent.worker_id} failed")


async def _stop_when_done(agent: WorkerAgent, stop_runner: object, stop: asyncio.Event) -> None:
    # A drained worker stays up (registered, heartbeating, drained) until undrained or stopped.
    waits = [
        asyncio.create_task(agent.failed.wait()),
        asyncio.create_task(agent.resharding.retired.wait()),
        asyncio.create_task(stop.wait()),
    ]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    agent.begin_close()
    assert callable(stop_runner)
    stop_runner()


async def run_agents(
    settings: Settings,
    configs: Sequence[WorkerConfig],
    make_engine: Callable[[WorkerConfig], Engine],
    stop: asyncio.Event,
    metrics: Metrics | None = None,
) -> list[str]:
    """Run one agent per config on one bus connection until each has failed or ``stop`` is
    set; returns the ids of the workers whose engine failed. With ``metrics``, what
    the agents publish also updates those metrics."""
    name = f"heddle-worker-{configs[0].worker_id}" if len(configs) == 1 else "heddle-workers"
    async with Bus(settings, BusOptions(name=name, publish=AGENT_PUBLISH)) as bus:
        ports = BusPorts(bus)
        # Metrics (heddle.observability): observe what the agents publish, by wrapping the sink.
        sink = ports if metrics is None else ObservedPorts(ports, metrics)
        agents = [
            WorkerAgent(
                config,
                make_engine(config),
                sink=sink,
                history=ports,
                blobs=ports,
            )
            for config in configs
        ]
        results = await asyncio.gather(
            *(serve(agent, bus, stop) for agent in agents), return_exceptions=True
        )
    failed: list[str] = []
    for agent, result in zip(agents, results, strict=True):
        if isinstance(result, WorkerFailing):
            failed.append(agent.worker_id)
        elif isinstance(result, BaseException):
            raise result
    return failed
