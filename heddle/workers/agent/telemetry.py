"""Liveness and load: ``WorkerHeartbeat`` and ``WorkerTelemetry``, both on core NATS (not stored).

The control plane declares a worker dead when its heartbeats stop; telemetry feeds load-aware
decisions about once a second. Both are best effort: a heartbeat lost in an outage is simply not
sent (the next one is), and only registration, drain and failure are events of the stream
(``heddle.bus.telemetry`` says why).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from heddle.events import WorkerHeartbeat, WorkerTelemetry
from heddle.ids import derive_id
from heddle.workers.agent.publisher import DurablePublisher
from heddle.workers.agent.steps import StepRunner
from heddle.workers.agent.table import TrajectoryTable
from heddle.workers.engines.base import Engine


class Telemetry:
    def __init__(
        self,
        *,
        worker_id: str,
        incarnation: str,
        engine: Engine,
        table: TrajectoryTable,
        runner: StepRunner,
        publisher: DurablePublisher,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.worker_id = worker_id
        self.incarnation = incarnation
        self.engine = engine
        self.table = table
        self.runner = runner
        self.publisher = publisher
        self.clock = clock
        self.monotonic = monotonic
        self.num_heartbeats = 0
        self._last_tokens = 0
        self._last_at_s = monotonic()

    async def heartbeat(self) -> WorkerHeartbeat:
        load = await self.engine.load()
        self.num_heartbeats += 1
        event = WorkerHeartbeat(
            event_id=derive_id(self.worker_id, self.incarnation, "heartbeat", self.num_heartbeats),
            occurred_at=self.clock(),
            worker_id=self.worker_id,
            sequence=self.num_heartbeats,
            num_running=load.num_running,
            num_waiting=load.num_waiting,
            num_trajectories=len(self.table.hosted()),
            kv_usage=load.kv_usage,
        )
        await self.publisher.publish_telemetry(event)
        return event

    async def telemetry(self) -> WorkerTelemetry:
        load = await self.engine.load()
        now_s = self.monotonic()
        tokens = self.runner.num_output_tokens
        elapsed_s = max(now_s - self._last_at_s, 1e-9)
        rate = (tokens - self._last_tokens) / (elapsed_s * self.runner.time_scale)
        self._last_tokens, self._last_at_s = tokens, now_s
        message = WorkerTelemetry(
            worker_id=self.worker_id,
            sent_at=self.clock(),
            num_running=load.num_running,
            num_waiting=load.num_waiting,
            kv_usage=load.kv_usage,
            tokens_per_s=rate,  # per model second, like every timing the worker reports
            running_traj_ids=[row.traj_id for row in self.table.generating()],
        )
        await self.publisher.publish_telemetry(message)
        return message

    async def run_heartbeats(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.heartbeat()

    async def run_telemetry(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.telemetry()
