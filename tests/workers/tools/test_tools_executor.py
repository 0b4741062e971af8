"""The executor service against a real nats-server: results, de-duplication, dead letters,
concurrency and scale-out over one shared durable."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from heddle.bus import Bus, Delivery, ReplayQuery
from heddle.config import load_settings
from heddle.events import DeadLettered, ToolCall, ToolRequest, ToolReturned
from heddle.events.commands import PythonTool, SearchTool, TraceTool, UnitTestTool
from heddle.events.subjects import DEADLETTER_SUBJECT, tool_subject, trajectory_subject
from heddle.ids import derive_id
from heddle.workers.tools.executor import ExecutorConfig, ToolExecutor
from heddle.workers.tools.trace import pseudo_token_ids

R = "r-exec"


@pytest.fixture
async def bus(nats_url: str, tmp_path: Path) -> AsyncIterator[Bus]:
    async with Bus(load_settings(nats_url=nats_url, data_dir=tmp_path)) as connected:
        yield connected


def call(request: ToolRequest, traj: str, step: int = 0, **fields: object) -> ToolCall:
    values: dict[str, object] = {
        "command_id": derive_id(R, traj, step, "tool_call"),
        "rollout_id": R,
        "issued_at": 0.0,
        "traj_id": traj,
        "step": step,
        "call_id": derive_id(R, traj, step, "call"),
        "request": request,
        "timeout_s": 20.0,
    }
    return ToolCall(**(values | fields))  # type: ignore[arg-type]


async def results(bus: Bus) -> list[ToolReturned]:
    query = ReplayQuery(filter_subjects=(trajectory_subject(R, "*", "tool_returned"),))
    return [
        record.message
        async for record in bus.replay_events(query)
        if isinstance(record.message, ToolReturned)
    ]


def config(**fields: object) -> ExecutorConfig:
    values: dict[str, object] = {"min_warm": 1, "max_procs": 4, "executor_id": "e1"}
    return ExecutorConfig(**(values | fields))  # type: ignore[arg-type]


async def test_each_kind_of_call_gets_its_result(bus: Bus) -> None:
    calls = [
        call(PythonTool(code="print(40 + 2)"), "t1"),
        call(PythonTool(code="raise SystemExit(4)"), "t2"),
        call(SearchTool(query="capital of Canada", top_k=1), "t3"),
        call(TraceTool(duration_s=1.0, num_output_tokens=4, seed=9), "t4", time_scale=100.0),
        call(
            UnitTestTool(
                files={"m.py": "X = 1\n"},
                test_code="from m import X\ndef test_x():\n    assert X == 1\n",
            ),
            "t5",
        ),
    ]
    for tool_call in calls:
        await bus.publish(tool_call)
    stats = await ToolExecutor(bus, config()).run(until_idle=True)
    assert stats.num_acked == 5
    by_traj = {result.traj_id: result for result in await results(bus)}
    assert by_traj["t1"].status == "ok" and by_traj["t1"].output == "42\n"
    assert (by_traj["t2"].status, by_traj["t2"].exit_code) == ("error", 4)
    assert by_traj["t3"].output.startswith("[1] (ottawa)")
    assert by_traj["t4"].output_token_ids == pseudo_token_ids(9, 4)
    assert by_traj["t5"].output.endswith("heddle-tests: passed=1 failed=0 total=1\n")
    for tool_call in calls:
        result = by_traj[tool_call.traj_id]
        assert result.event_id == derive_id(tool_call.call_id, "tool_returned")
        assert (result.call_id, result.executor_id) == (tool_call.call_id, "e1")


async def test_a_call_run_twice_stores_one_result(bus: Bus) -> None:
    first = call(PythonTool(code="import random; print(random.random())"), "t1")
    again = call(first.request, "t1", command_id="redelivered-copy")
    await bus.publish(first)
    await bus.publish(again)
    stats = await ToolExecutor(bus, config()).run(until_idle=True)
    assert stats.num_acked == 2
    assert len(await results(bus)) == 1


async def test_bad_calls_are_dead_lettered_and_good_ones_run(bus: Bus) -> None:
    await bus.publish_raw(tool_subject("default"), b"{not json", msg_id="junk-1")
    await bus.publish(call(PythonTool(code="print(1)"), "t1", rollout_id="bad.rollout"))
    await bus.publish(call(PythonTool(code="print('good')"), "t2"))
    stats = await ToolExecutor(bus, config()).run(until_idle=True)
    assert stats.num_dead_lettered == 2
    dead = [
        record.message
        async for record in bus.replay_events(ReplayQuery(filter_subjects=(DEADLETTER_SUBJECT,)))
    ]
    assert all(isinstance(letter, DeadLettered) for letter in dead)
    reasons = sorted(letter.reason for letter in dead if isinstance(letter, DeadLettered))
    assert "malformed JSON" in reasons[0] or "malformed JSON" in reasons[1]
    assert any("rollout id 'bad.rollout'" in reason for reason in reasons)
    assert [result.output for result in await results(bus)] == ["good\n"]


def max_overlap(returned: list[ToolReturned]) -> int:
    """Most calls running at the same moment, from each result's end time and duration."""
    edges = []
    for result in returned:
        edges += [(result.occurred_at - result.duration_s, 1), (result.occurred_at, -1)]
    running = best = 0
    for _, change in sorted(edges):
        running += change
        best = max(best, running)
    return best


async def test_waiting_calls_run_concurrently(bus: Bus) -> None:
    for index in range(8):
        await bus.publish(call(TraceTool(duration_s=0.5, num_output_tokens=1), f"t{index}"))
    await ToolExecutor(bus, config(min_warm=0, max_in_flight=16)).run(until_idle=True)
    returned = await results(bus)
    assert len(returned) == 8
    assert max_overlap(returned) >= 2


async def test_executors_share_the_pool_durable(bus: Bus, nats_url: str, tmp_path: Path) -> None:
    for index in range(12):
        await bus.publish(call(TraceTool(duration_s=0.3, num_output_tokens=1), f"t{index}"))
    async with Bus(load_settings(nats_url=nats_url, data_dir=tmp_path)) as other_bus:
        first = ToolExecutor(bus, config(min_warm=0, max_in_flight=2, executor_id="e1"))
        second = ToolExecutor(other_bus, config(min_warm=0, max_in_flight=2, executor_id="e2"))
        await asyncio.gather(first.run(until_idle=True), second.run(until_idle=True))
    returned = await results(bus)
    assert len(returned) == 12
    assert {result.executor_id for result in returned} == {"e1", "e2"}


async def test_stop_finishes_calls_in_flight(bus: Bus) -> None:
    await bus.publish(call(TraceTool(duration_s=0.5, num_output_tokens=2), "t1"))
    executor = ToolExecutor(bus, config(min_warm=0))
    started = asyncio.Event()
    handle = executor.handle

    async def observed_handle(delivery: Delivery[ToolCall]) -> None:
        started.set()
        await handle(delivery)

    executor.handle = observed_handle  # type: ignore[method-assign]
    running = asyncio.create_task(executor.run())
    await started.wait()
    executor.stop()
    stats = await running
    assert stats.num_acked == 1
    assert len(await results(bus)) == 1


async def test_pool_target_follows_the_queue_depth(bus: Bus) -> None:
    for index in range(6):
        await bus.publish(call(PythonTool(code="print(1)"), f"t{index}"))
    executor = ToolExecutor(bus, config(min_warm=1, max_procs=4, max_in_flight=1))
    targets: list[int] = []
    handle = executor.handle

    async def observed_handle(delivery: Delivery[ToolCall]) -> None:
        task = asyncio.create_task(handle(delivery))
        await asyncio.sleep(0)  # let the handler report the queue depth to the pool
        targets.append(executor.pool.target_parked)
        await task

    executor.handle = observed_handle  # type: ignore[method-assign]
    await executor.run(until_idle=True)
    assert max(targets) >= 3, "5 calls queued behind the first: parked target rises to max"
    assert targets[-1] == 1, "the queue is empty at the last call: back to min_warm"
