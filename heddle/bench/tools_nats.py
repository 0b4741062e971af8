"""End-to-end tool-call benchmark through NATS: publish ``ToolCall`` -> ``ToolReturned`` received.

A real executor (``ToolExecutor``, warm pool) serves the pool while a durable consumer on the
events stream receives the results, as a worker would. Two requests: the trivial Python snippet
(bus + sandbox) and a zero-length trace tool (the bus path alone).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from heddle.bench.tools import TRIVIAL_SNIPPET, LatencyStats, measure_timed
from heddle.bus import Bus, ConsumerSpec, Delivery
from heddle.events import EventT, ToolCall, ToolRequest, ToolReturned, decode_event
from heddle.events.commands import PythonTool, TraceTool
from heddle.events.subjects import EVENTS_STREAM, TOOLS_STREAM, trajectory_subject, worker_role
from heddle.workers.tools.executor import ExecutorConfig, ToolExecutor, tool_consumer_spec

BENCH_POOL = "bench"


@dataclass(frozen=True, slots=True)
class NatsFigures:
    python_sequential: LatencyStats
    python_concurrent: LatencyStats
    trace_sequential: LatencyStats


class _Results:
    """Futures of the results awaited, resolved by the events consumer."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[ToolReturned]] = {}

    def expect(self, call_id: str) -> asyncio.Future[ToolReturned]:
        future: asyncio.Future[ToolReturned] = asyncio.get_running_loop().create_future()
        self.waiting[call_id] = future
        return future

    async def receive(self, delivery: Delivery[EventT]) -> None:
        event = delivery.message
        if isinstance(event, ToolReturned):
            future = self.waiting.pop(event.call_id, None)
            if future is not None and not future.done():
                future.set_result(event)


class _Client:
    def __init__(self, bus: Bus, results: _Results, rollout_id: str) -> None:
        self.bus = bus
        self.results = results
        self.rollout_id = rollout_id
        self.num_calls = 0

    async def call(self, request: ToolRequest) -> tuple[float, bool]:
        """(latency in seconds, ok) of one call through the bus."""
        self.num_calls += 1
        call_id = f"k{self.num_calls:06d}"
        future = self.results.expect(call_id)
        started = time.perf_counter()
        await self.bus.publish(
            ToolCall(
                command_id=f"{self.rollout_id}-{call_id}",
                rollout_id=self.rollout_id,
                issued_at=time.time(),
                traj_id=call_id,
                step=0,
                call_id=call_id,
                pool=BENCH_POOL,
                request=request,
            )
        )
        result = await asyncio.wait_for(future, 60.0)
        return time.perf_counter() - started, result.status == "ok"

    async def measure(
        self, request: ToolRequest, num_calls: int, concurrency: int, gap_s: float
    ) -> LatencyStats:
        return await measure_timed(lambda: self.call(request), num_calls, concurrency, gap_s)


async def bench_through_nats(
    bus: Bus, num_calls: int, concurrency: int, min_warm: int, gap_s: float
) -> NatsFigures:
    rollout_id = f"bench-{uuid.uuid4().hex[:8]}"
    results = _Results()
    spec = ConsumerSpec(
        durable=f"{rollout_id}-results",
        stream=EVENTS_STREAM,
        filter_subjects=(trajectory_subject(rollout_id, "*", "tool_returned"),),
        role=worker_role("bench"),  # it awaits the results as a worker would
        fetch_wait_s=0.5,
    )
    receiver = bus.message_runner(spec, decode_event, results.receive, max_concurrent=64)
    config = ExecutorConfig(
        pool=BENCH_POOL, min_warm=min_warm, max_procs=min_warm + concurrency, executor_id="bench"
    )
    executor = ToolExecutor(bus, config)
    tasks = [asyncio.create_task(receiver.run()), asyncio.create_task(executor.run())]
    client = _Client(bus, results, rollout_id)
    try:
        await client.call(TraceTool(duration_s=0.0, num_output_tokens=1))  # warm-up
        python = PythonTool(code=TRIVIAL_SNIPPET)
        figures = NatsFigures(
            python_sequential=await client.measure(python, num_calls, 1, gap_s),
            python_concurrent=await client.measure(python, num_calls, concurrency, 0.0),
            trace_sequential=await client.measure(
                TraceTool(duration_s=0.0, num_output_tokens=1), num_calls, 1, gap_s
            ),
        )
    finally:
        receiver.stop()
        executor.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        await bus.delete_consumer(EVENTS_STREAM, spec.durable)
        await bus.delete_consumer(TOOLS_STREAM, tool_consumer_spec(config).durable)
    return figures
