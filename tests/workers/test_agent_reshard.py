"""A worker's part in a re-shard, against a real nats-server with sim engines: ``Retire``
interrupts a generation, publishes what it produced and hands the trajectory back (the worker
then stops), and the worker it goes to finishes the step from there; ``Reshard`` interrupts,
relaunches the engine at the new degree, registers again and finishes the step. Every step's
``Generated`` holds its whole output. The test's router plays the control plane (see
``test_agent_nats``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

import pytest
from test_agent_nats import Router, step_keys, tool_executor, trace, trace_spec

from heddle.bus import Bus, ReplayQuery
from heddle.config import Settings, load_settings
from heddle.events import (
    Completed,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    Reshard,
    Retire,
    WorkerRegistered,
    WorkerRetired,
)
from heddle.workers.agent import WorkerConfig
from heddle.workers.agent.transport import run_agents
from heddle.workers.engines.simulated import SimulatedEngine, SimulatedEngineOptions

pytestmark = pytest.mark.timeout(240)
TIME_SCALE = 10.0
"""A 4,000-token step of qwen3-8b at TP1 takes ~4 s of wall time: long enough to interrupt."""
LONG = 4000
"""Tokens of the step interrupted (within the spec's ``max_new_tokens``)."""


@pytest.fixture
def settings(nats_url: str, tmp_path: pytest.TempPathFactory) -> Settings:
    return load_settings(nats_url=nats_url, data_dir=tmp_path)


@pytest.fixture
async def bus(settings: Settings) -> AsyncIterator[Bus]:
    async with Bus(settings) as connected:
        yield connected


@contextlib.asynccontextmanager
async def agents(
    settings: Settings, gpus: dict[str, str]
) -> AsyncIterator[asyncio.Task[list[str]]]:
    """One sim worker per entry, on the GPUs given (one node)."""
    stop = asyncio.Event()
    configs = [WorkerConfig(worker_id=w, heartbeat_s=0.5, node="n0") for w in gpus]

    def engine(config: WorkerConfig) -> SimulatedEngine:
        options = SimulatedEngineOptions(
            time_scale=TIME_SCALE, gpu_ids=gpus[config.worker_id], restart_s=30.0
        )
        return SimulatedEngine(options)

    task = asyncio.create_task(run_agents(settings, configs, engine, stop))
    try:
        yield task
    finally:
        stop.set()
        assert await task == []  # none failed (a retired one ends on its own)


async def worker_events(bus: Bus, worker_id: str) -> list[object]:
    query = ReplayQuery(filter_subjects=(f"heddle.evt.worker.{worker_id}.>",))
    return [record.message async for record in bus.replay_events(query)]


async def wait_generating(router: Router, traj_id: str) -> None:
    await router.wait(lambda events: "generation_started0" in step_keys(events, traj_id))
    await asyncio.sleep(1.0)  # some of its output is out


def whole_outputs(events: Sequence[object], traj_id: str) -> list[int]:
    return [
        len(e.output_token_ids) for e in events if isinstance(e, Generated) and e.traj_id == traj_id
    ]


async def test_a_retiring_worker_hands_over_an_interrupted_generation(
    settings: Settings, bus: Bus
) -> None:
    item = trace("x", [LONG, 40])
    async with (
        tool_executor(bus),
        agents(settings, {"w0": "0", "w1": "1"}) as running,
        Router(bus, "rr") as router,
    ):
        await router.submit(item.id, trace_spec(item), "w1")
        await wait_generating(router, "x")
        await bus.publish(
            Retire(command_id="retire-1", issued_at=0.0, worker_id="w1", reshard_id="rs1",
                   successor_worker_id="w0")
        )  # fmt: skip
        events = await router.wait(
            lambda events: any(isinstance(e, GenerationInterrupted) for e in events)
        )
        (part,) = [e for e in events if isinstance(e, GenerationInterrupted)]
        assert part.worker_id == "w1" and 0 < len(part.output_token_ids) < LONG
        retired = [e for e in await worker_events(bus, "w1") if isinstance(e, WorkerRetired)]
        assert [(e.successor_worker_id, e.trajectory_ids, e.gpu_ids) for e in retired] == [
            ("w0", ["x"], [1])
        ]
        assert not running.done()  # w0 serves on
        await router.place("x", trace_spec(item), "w0", resume=True)
        events = await router.wait_all_finished(["x"])
    assert whole_outputs(events, "x") == [LONG, 40]
    generated = [e for e in events if isinstance(e, Generated)]
    assert [e.worker_id for e in generated] == ["w0", "w0"]
    assert sum(isinstance(e, GenerationStarted) for e in events) == 2  # the step ran on
    done = next(e for e in events if isinstance(e, Completed))
    assert done.num_output_tokens == item.num_output_tokens
    assert sum(done.loss_mask) == item.num_output_tokens


async def test_a_resharded_worker_relaunches_at_the_new_degree_and_finishes_the_step(
    settings: Settings, bus: Bus
) -> None:
    item = trace("y", [LONG, 40])
    async with tool_executor(bus), agents(settings, {"w0": "0"}), Router(bus, "rs") as router:
        await router.submit(item.id, trace_spec(item), "w0")
        await wait_generating(router, "y")
        await bus.publish(
            Reshard(command_id="reshard-1", issued_at=0.0, worker_id="w0", reshard_id="rs2",
                    tp_degree=2, gpu_ids=[0, 1])
        )  # fmt: skip
        events = await router.wait_all_finished(["y"])
    (part,) = [e for e in events if isinstance(e, GenerationInterrupted)]
    assert part.worker_id == "w0" and 0 < len(part.output_token_ids) < LONG
    assert whole_outputs(events, "y") == [LONG, 40]
    registrations = [e for e in await worker_events(bus, "w0") if isinstance(e, WorkerRegistered)]
    assert [(e.tp_degree, e.gpu_ids) for e in registrations] == [(1, [0]), (2, [0, 1])]
    assert registrations[0].incarnation != registrations[1].incarnation
    generated = next(e for e in events if isinstance(e, Generated))
    assert generated.num_recomputed_tokens > 0  # the new engine re-prefilled the context
