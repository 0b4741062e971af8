"""The tool executor service behind ``heddle tools serve``.

Every executor of a pool pulls from ONE shared durable consumer, ``tools-<pool>`` on stream
``HEDDLE_TOOLS`` (work-queue retention, subject ``heddle.cmd.tool.<pool>``), so starting more
executors adds capacity. Per call: run it (``ToolRunner``), publish its ``ToolReturned`` on the
trajectory's subject with ``Nats-Msg-Id`` = the event id derived from (rollout, trajectory, step),
then ack. Consequences:

- a crash before the ack redelivers the call; it runs again, and the second ``ToolReturned`` is
  dropped by JetStream as a duplicate of the first (within the stream's duplicate window);
- undecodable calls, and calls whose ids cannot form a subject, are dead-lettered by the bus
  runner and never retried; a publish failure naks the call for a later retry;
- up to ``max_in_flight`` calls run at once (trace calls mostly wait); sandbox calls are further
  bounded by the pool's ``max_procs``; long calls send in-progress signals so the server does not
  redeliver them meanwhile;
- the sandbox pool is told the queue depth (the consumer's pending count, seen on each delivery)
  and keeps ``clamp(depth, min_warm, max_procs - running)`` processes parked;
- once its sandbox isolation is resolved (a probe call), before taking calls, the executor
  publishes ``ExecutorRegistered`` naming the level in force; a failed publish (e.g. a
  credential without that permission) is logged as an error and the executor serves anyway.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from heddle.bus import (
    Bus,
    ConsumerSpec,
    Delivery,
    InvalidMessage,
    MessageRunner,
    PublishError,
    RunnerStats,
    TransientError,
)
from heddle.events import ExecutorRegistered, ToolCall, decode_tool_call
from heddle.events.subjects import (
    TOOL_EXECUTOR_ROLE,
    TOOLS_STREAM,
    tool_subject,
    trajectory_subject,
)
from heddle.ids import check_token, derive_id
from heddle.workers.tools.call_runner import ToolRunner, ToolRunnerConfig, result_event
from heddle.workers.tools.isolation import Isolation
from heddle.workers.tools.limits import SandboxConfig
from heddle.workers.tools.pool import SandboxPool
from heddle.workers.tools.search import SAMPLE_CORPUS, CorpusCatalog

log = logging.getLogger(__name__)


def default_executor_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}".replace(".", "-")


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    pool: str = "default"
    """Tool pool served: calls on ``heddle.cmd.tool.<pool>``."""
    executor_id: str = field(default_factory=default_executor_id)
    """Written into each ``ToolReturned.executor_id``."""
    min_warm: int = 2
    """Sandbox processes kept parked even when the queue is empty."""
    max_procs: int = 8
    """Most sandbox processes (parked + running) of this executor."""
    max_in_flight: int = 64
    """Most calls of any kind handled at once by this executor."""
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    runner: ToolRunnerConfig = field(default_factory=ToolRunnerConfig)
    default_corpus: Path = SAMPLE_CORPUS
    """Corpus of search calls that name none."""
    ack_wait_s: float = 30.0
    """Redelivery delay of a call whose executor died; running calls send in-progress signals
    every ``ack_wait_s / 2`` so they are not redelivered while alive."""

    def __post_init__(self) -> None:
        check_token(self.pool, "tool pool")
        check_token(self.executor_id, "executor id")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {self.max_in_flight}")


def tool_consumer_spec(config: ExecutorConfig) -> ConsumerSpec:
    """The durable every executor of ``config.pool`` shares."""
    return ConsumerSpec(
        durable=f"tools-{config.pool}",
        stream=TOOLS_STREAM,
        filter_subjects=(tool_subject(config.pool),),
        role=TOOL_EXECUTOR_ROLE,
        batch_size=min(64, config.max_in_flight),
        max_ack_pending=max(4096, config.max_in_flight),
        ack_wait_s=config.ack_wait_s,
    )


def check_call(call: ToolCall, pool: str) -> None:
    """``InvalidMessage`` for a call this executor must never run: another pool's, or one whose
    result could not be published (ids that are not subject tokens)."""
    if call.pool != pool:
        raise InvalidMessage(f"call for pool {call.pool!r} delivered to pool {pool!r}")
    try:
        trajectory_subject(call.rollout_id, call.traj_id)
    except ValueError as exc:
        raise InvalidMessage(str(exc)) from None


class ToolExecutor:
    """One executor process: ``await ToolExecutor(bus, config).run()`` until ``stop()``."""

    def __init__(self, bus: Bus, config: ExecutorConfig | None = None) -> None:
        self.bus = bus
        self.config = config or ExecutorConfig()
        self._pool: SandboxPool | None = None
        self._runner: ToolRunner | None = None
        self._consumer: MessageRunner[ToolCall] | None = None
        self._stop_requested = False
        self._incarnation = uuid.uuid4().hex[:12]

    @property
    def pool(self) -> SandboxPool:
        if self._pool is None:
            raise RuntimeError("the executor is not running")
        return self._pool

    async def run(self, *, until_idle: bool = False) -> RunnerStats:
        """Serve calls until ``stop()`` (or, with ``until_idle``, until the queue is empty)."""
        config = self.config
        async with SandboxPool(
            config.sandbox, min_warm=config.min_warm, max_procs=config.max_procs
        ) as pool:
            self._pool = pool
            await self._register(pool.isolation)
            self._runner = ToolRunner(pool, CorpusCatalog(config.default_corpus), config.runner)
            self._consumer = self.bus.message_runner(
                tool_consumer_spec(config),
                decode_tool_call,
                self.handle,
                max_concurrent=config.max_in_flight,
            )
            if self._stop_requested:
                self._consumer.stop()
            try:
                return await self._consumer.run(until_idle=until_idle)
            finally:
                self._consumer = None
                self._pool = None

    def registration(self, isolation: Isolation) -> ExecutorRegistered:
        config = self.config
        return ExecutorRegistered(
            event_id=derive_id(config.executor_id, self._incarnation, "registered"),
            occurred_at=time.time(),
            executor_id=config.executor_id,
            pool=config.pool,
            isolation=isolation.level,
            isolation_detail=isolation.detail,
            host=socket.gethostname(),
            max_procs=config.max_procs,
        )

    async def _register(self, isolation: Isolation) -> None:
        report = log.info if isolation.is_isolated else log.warning
        report("executor %s: sandbox isolation %s", self.config.executor_id, isolation.describe())
        try:
            await self.bus.publish(self.registration(isolation))
        except PublishError as exc:
            log.error("executor %s: registration not published: %s", self.config.executor_id, exc)

    def stop(self) -> None:
        """Finish the calls in flight, then return from ``run()``."""
        self._stop_requested = True
        if self._consumer is not None:
            self._consumer.stop()

    async def handle(self, delivery: Delivery[ToolCall]) -> None:
        call = delivery.message
        check_call(call, self.config.pool)
        assert self._runner is not None and self._pool is not None
        self._pool.set_demand(delivery.num_pending)
        outcome = await self._runner.run(call)
        event = result_event(call, outcome, executor_id=self.config.executor_id, now=time.time())
        try:
            await self.bus.publish(event)
        except PublishError as exc:
            raise TransientError(f"publishing the result of {call.call_id}: {exc}") from exc
