"""The worker agent against a real nats-server, with real tool executors.

The control plane is not part of this package, so a small router here plays its part: it
publishes TrajectorySubmitted/Placed and StartTrajectory, and on each ToolReturned publishes
ContinueTrajectory to the worker the trajectory is on (following Migrated events). That is a test
harness driving the real worker over the real bus, not a stand-in for a worker feature.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from events_factory import continue_after

from heddle.bus import Bus, BusOptions, ConsumerSpec, Delivery, EmbeddedNatsServer, ReplayQuery
from heddle.config import Settings, load_settings
from heddle.events import (
    Completed,
    ContinueTrajectory,
    Drain,
    EventT,
    Failed,
    Generated,
    GenerationStarted,
    Migrated,
    MigrateOut,
    StartTrajectory,
    ToolReturned,
    TrajectoryEvent,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
    WorkerDrained,
    WorkerHeartbeat,
    WorkerRegistered,
    WorkerTelemetry,
    decode_event,
)
from heddle.events.subjects import (
    EVENTS_STREAM,
    rollout_filter,
    trajectory_subject,
    trajectory_subjects,
)
from heddle.events.trajectory import PlacementReason
from heddle.ids import derive_id
from heddle.rollout.summary import summarize_rollout
from heddle.traces import TraceStep, TraceTrajectory, write_trace
from heddle.workers.agent import WorkerConfig
from heddle.workers.agent.agent import WorkerAgent
from heddle.workers.agent.transport import AGENT_PUBLISH, BusPorts, run_agents, serve
from heddle.workers.engines.simulated import SimulatedEngine, SimulatedEngineOptions
from heddle.workers.tools.executor import ExecutorConfig, ToolExecutor

pytestmark = pytest.mark.timeout(240)
STARTUP_TIMEOUT_S = 90.0
"""A liveness bound, not a timing assertion: a child process imports the whole CLI first, which
takes seconds on a loaded 2-core machine."""

CHILD_MAIN = "from heddle.cli import main; main()"


class Router:
    """Plays the control plane's router over the bus (see the module docstring)."""

    def __init__(self, bus: Bus, rollout_id: str) -> None:
        self.bus = bus
        self.rollout_id = rollout_id
        self.placement: dict[str, str] = {}
        self._task: asyncio.Task[Any] | None = None
        self._runner: Any = None

    async def __aenter__(self) -> Router:
        spec = ConsumerSpec(
            durable=f"test-router-{self.rollout_id}",
            stream=EVENTS_STREAM,
            filter_subjects=(
                trajectory_subject(self.rollout_id, "*", "tool_returned"),
                *trajectory_subjects(self.rollout_id, "*", "migrated"),
            ),
            role="control_plane",
            batch_size=64,
            fetch_wait_s=0.2,
        )
        self._runner = self.bus.batch_runner(spec, decode_event, self._route)
        self._task = asyncio.create_task(self._runner.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._runner.stop()
        assert self._task is not None
        await self._task

    async def _route(self, batch: list[Delivery[EventT]]) -> None:
        for delivery in batch:
            match delivery.message:
                case Migrated() as migrated:
                    self.placement[migrated.traj_id] = migrated.target_worker_id
                case ToolReturned() as result:
                    await self.bus.publish(self.continue_command(result))

    def continue_command(self, result: ToolReturned) -> ContinueTrajectory:
        return continue_after(result, self.placement[result.traj_id])

    async def submit(self, traj_id: str, spec: TrajectorySpec, worker_id: str) -> None:
        self.placement[traj_id] = worker_id
        await self.bus.publish(
            TrajectorySubmitted(
                event_id=derive_id(self.rollout_id, traj_id, "submitted"),
                rollout_id=self.rollout_id,
                traj_id=traj_id,
                occurred_at=0.0,
                spec=spec,
            )
        )
        await self.place(traj_id, spec, worker_id)

    async def place(
        self, traj_id: str, spec: TrajectorySpec, worker_id: str, *, resume: bool = False
    ) -> None:
        self.placement[traj_id] = worker_id
        reason: PlacementReason = "replacement" if resume else "initial"
        await self.bus.publish(
            TrajectoryPlaced(
                event_id=derive_id(self.rollout_id, traj_id, "placed", worker_id),
                rollout_id=self.rollout_id,
                traj_id=traj_id,
                occurred_at=0.0,
                worker_id=worker_id,
                reason=reason,
            )
        )
        await self.bus.publish(
            StartTrajectory(
                command_id=derive_id(self.rollout_id, traj_id, "start", worker_id),
                rollout_id=self.rollout_id,
                issued_at=0.0,
                worker_id=worker_id,
                traj_id=traj_id,
                spec=spec,
                resume=resume,
            )
        )

    async def events(self) -> list[TrajectoryEvent]:
        query = ReplayQuery(filter_subjects=tuple(rollout_filter(self.rollout_id)))
        return [
            record.message
            async for record in self.bus.replay_events(query)
            if isinstance(record.message, TrajectoryEvent)
        ]

    async def wait(self, predicate: Any, timeout_s: float = 120.0) -> list[TrajectoryEvent]:
        async with asyncio.timeout(timeout_s):
            while True:
                events = await self.events()
                if predicate(events):
                    return events
                await asyncio.sleep(0.1)

    async def wait_all_finished(
        self, traj_ids: Sequence[str], timeout_s: float = 120.0
    ) -> list[TrajectoryEvent]:
        def finished(events: list[TrajectoryEvent]) -> bool:
            done = {e.traj_id for e in events if isinstance(e, (Completed, Failed))}
            return done >= set(traj_ids)

        return await self.wait(finished, timeout_s)


def trace_spec(trace: TraceTrajectory, index: int = 0) -> TrajectorySpec:
    import msgspec

    return TrajectorySpec(
        group_id=trace.group or "g",
        index=index,
        environment="trace",
        task=msgspec.to_builtins(trace),
    )


def trace(traj_id: str, outputs: list[int], tool_s: float = 1.0) -> TraceTrajectory:
    steps = [TraceStep(output_tokens=n, tool_s=tool_s, tool_output_tokens=9) for n in outputs]
    steps[-1] = TraceStep(output_tokens=outputs[-1])
    return TraceTrajectory(id=traj_id, group="g", prompt_tokens=25, steps=steps)


def step_keys(events: list[TrajectoryEvent], traj_id: str) -> list[str]:
    """kind+step of each event of one trajectory, in stream order."""
    keys = []
    for event in events:
        if event.traj_id == traj_id and not isinstance(event, (TrajectoryPlaced, Migrated)):
            step = getattr(event, "step", "")
            keys.append(f"{type(event).kind_name()}{step}")
    return keys


def expected_keys(num_steps: int) -> list[str]:
    keys = ["submitted"]
    for step in range(num_steps):
        keys += [f"generation_started{step}", f"generated{step}"]
        if step < num_steps - 1:
            keys += [f"tool_called{step}", f"tool_returned{step}"]
    return [*keys, "completed"]


@pytest.fixture
def settings(nats_url: str, tmp_path: Path) -> Settings:
    return load_settings(nats_url=nats_url, data_dir=tmp_path)


@pytest.fixture
async def bus(settings: Settings) -> AsyncIterator[Bus]:
    async with Bus(settings) as connected:
        yield connected


@contextlib.asynccontextmanager
async def tool_executor(bus: Bus) -> AsyncIterator[ToolExecutor]:
    executor = ToolExecutor(bus, ExecutorConfig(min_warm=0, max_procs=1, executor_id="ex"))
    task = asyncio.create_task(executor.run())
    try:
        yield executor
    finally:
        executor.stop()
        await task


@contextlib.asynccontextmanager
async def agents(
    settings: Settings,
    worker_ids: Sequence[str],
    time_scale: float = 2000.0,
    engine_model: str = "torch",
) -> AsyncIterator[asyncio.Event]:
    """Worker agents with sim engines in this process, served over their own bus (the torch
    engine model unless told: most of these tests migrate with KV transfer)."""
    stop = asyncio.Event()
    configs = [WorkerConfig(worker_id=w, heartbeat_s=0.5, telemetry_s=0.5) for w in worker_ids]
    task = asyncio.create_task(
        run_agents(
            settings,
            configs,
            lambda c: SimulatedEngine(
                SimulatedEngineOptions(time_scale=time_scale, engine_model=engine_model)
            ),
            stop,
        )
    )
    try:
        yield stop
    finally:
        stop.set()
        assert await task == []


async def test_a_small_trace_runs_end_to_end_with_every_step_in_order(
    settings: Settings, bus: Bus
) -> None:
    traces = [trace("a", [30, 20, 10]), trace("b", [50, 5]), trace("c", [12])]
    async with tool_executor(bus), agents(settings, ["w0"]), Router(bus, "r1") as router:
        for index, item in enumerate(traces):
            await router.submit(item.id, trace_spec(item, index), "w0")
        events = await router.wait_all_finished([t.id for t in traces])
    for item in traces:
        assert step_keys(events, item.id) == expected_keys(len(item.steps))
        done = next(e for e in events if isinstance(e, Completed) and e.traj_id == item.id)
        assert done.num_output_tokens == item.num_output_tokens
        assert len(done.prompt_token_ids) + len(done.response_token_ids) == (
            item.num_context_tokens
        )
        assert sum(done.loss_mask) == item.num_output_tokens
        assert done.worker_history == ["w0"]
    tool_results = [e for e in events if isinstance(e, ToolReturned)]
    assert {e.executor_id for e in tool_results} == {"ex"}


async def test_migration_in_a_tool_gap_completes_on_the_target(
    settings: Settings, bus: Bus
) -> None:
    item = trace("m", [40, 30, 20], tool_s=1000.0)  # 0.5 s of wall time per tool call
    async with tool_executor(bus), agents(settings, ["w0", "w1"]), Router(bus, "r2") as router:
        await router.submit(item.id, trace_spec(item), "w0")
        await router.wait(lambda events: "tool_called0" in step_keys(events, "m"))
        await bus.publish(
            MigrateOut(command_id="mig-1", rollout_id="r2", issued_at=0.0, worker_id="w0",
                       traj_id="m", target_worker_id="w1", migration_id="mig-1")
        )  # fmt: skip
        events = await router.wait_all_finished(["m"])
    assert step_keys(events, "m") == expected_keys(3)
    migrated = next(e for e in events if isinstance(e, Migrated))
    assert (migrated.source_worker_id, migrated.target_worker_id) == ("w0", "w1")
    assert migrated.kv_transferred and migrated.num_bytes > 0
    done = next(e for e in events if isinstance(e, Completed))
    assert done.worker_history == ["w0", "w1"]
    assert done.num_recomputed_tokens == 0
    generated = [e for e in events if isinstance(e, Generated)]
    assert [e.worker_id for e in generated] == ["w0", "w1", "w1"]


async def test_a_migration_without_kv_transfer_warms_the_target_up_in_the_tool_gap(
    settings: Settings, bus: Bus
) -> None:
    """The sglang engine model: the target prefills the context during the tool call, its next
    step hits it, and the summary counts the warmed-up tokens and nothing left unhidden."""
    item = trace("s", [40, 30, 20], tool_s=1000.0)
    async with (
        tool_executor(bus),
        agents(settings, ["w0", "w1"], engine_model="sglang"),
        Router(bus, "r5") as router,
    ):
        await router.submit(item.id, trace_spec(item), "w0")
        await router.wait(lambda events: "tool_called0" in step_keys(events, "s"))
        await bus.publish(
            MigrateOut(command_id="mig-5", rollout_id="r5", issued_at=0.0, worker_id="w0",
                       traj_id="s", target_worker_id="w1", migration_id="mig-5")
        )  # fmt: skip
        events = await router.wait_all_finished(["s"])
    migrated = next(e for e in events if isinstance(e, Migrated))
    assert not migrated.kv_transferred
    generated = [e for e in events if isinstance(e, Generated)]
    assert [e.worker_id for e in generated] == ["w0", "w1", "w1"]
    context = generated[0].num_context_tokens  # prompt + step 0's output, warmed on w1
    assert generated[1].num_warmed_tokens == context
    assert generated[1].num_recomputed_tokens == 0 and generated[1].num_cached_tokens >= context
    summary = summarize_rollout("r5", events)
    assert (summary.warmed_up_tokens, summary.migration_recomputed_tokens) == (context, 0)


def start_process(settings: Settings, *args: str) -> subprocess.Popen[bytes]:
    """``heddle ARGS...`` as a child process against the test's NATS server."""
    env = dict(os.environ, HEDDLE_NATS_URL=settings.nats_url or "",
               HEDDLE_DATA_DIR=str(settings.data_dir))  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-c", CHILD_MAIN, *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def start_worker(settings: Settings, worker_id: str, *extra: str) -> subprocess.Popen[bytes]:
    return start_process(
        settings, "worker", f"--id={worker_id}", "--engine=sim", "--engine-model=torch",
        "--ack-wait-s=2", "--heartbeat-s=0.5", *extra,
    )  # fmt: skip


def stop_process(process: subprocess.Popen[bytes]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.stderr is not None
    return process.stderr.read().decode(errors="replace")


async def registered(
    router: Router, worker_id: str, count: int = 1, kind: str = "registered"
) -> None:
    """Wait until ``count`` worker events of ``kind`` from ``worker_id`` are in the stream."""
    async with asyncio.timeout(STARTUP_TIMEOUT_S):
        while True:
            if await num_worker_events(router.bus, worker_id, kind) >= count:
                return
            await asyncio.sleep(0.1)


async def num_worker_events(bus: Bus, worker_id: str, kind: str) -> int:
    query = ReplayQuery(filter_subjects=(f"heddle.evt.worker.{worker_id}.{kind}",))
    return len([r async for r in bus.replay_events(query)])


@pytest.mark.parametrize("recovery", ["restart", "replace"])
async def test_a_killed_worker_loses_no_completed_step(
    settings: Settings, bus: Bus, recovery: str
) -> None:
    # ~2 s of wall time per generation at time scale 2: the kill lands mid-generation.
    item = trace("k", [600, 600, 600, 600], tool_s=2.0)
    rollout = f"r-{recovery}"
    worker = start_worker(settings, "w0", "--time-scale=2")
    spare = start_worker(settings, "w1", "--time-scale=200") if recovery == "replace" else None
    try:
        async with tool_executor(bus), Router(bus, rollout) as router:
            await registered(router, "w0")
            await router.submit(item.id, trace_spec(item), "w0")
            await router.wait(lambda events: "generation_started1" in step_keys(events, "k"))
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            if recovery == "restart":
                worker = start_worker(settings, "w0", "--time-scale=200")
            else:
                assert spare is not None
                await registered(router, "w1")
                await router.place(item.id, trace_spec(item), "w1", resume=True)
            events = await router.wait_all_finished([item.id])
    finally:
        logs = stop_process(worker)
        if spare is not None:
            logs += stop_process(spare)
    assert step_keys(events, "k") == expected_keys(4), logs[-3000:]
    done = next(e for e in events if isinstance(e, Completed))
    assert done.num_output_tokens == 2400
    assert done.worker_history == (["w0"] if recovery == "restart" else ["w0", "w1"])
    started = [e for e in events if isinstance(e, GenerationStarted)]
    assert len({e.step for e in started}) == len(started) == 4
    # The kill interrupted step 1's generation: it ran again where the KV was lost, so its
    # prefix (prompt + step 0's output) counts as recomputed.
    generated = [e for e in events if isinstance(e, Generated)]
    assert generated[1].num_recomputed_tokens == 25 + 600
    assert generated[1].worker_id == ("w0" if recovery == "restart" else "w1")


async def test_acceptance_worker_and_executor_processes_run_a_trace_file(
    settings: Settings, bus: Bus, tmp_path: Path
) -> None:
    traces = [trace(f"t{i}", [20 + 10 * i, 15, 5], tool_s=0.5) for i in range(4)]
    trace_file = tmp_path / "trace.jsonl"
    write_trace(trace_file, traces)
    executor = start_process(settings, "tools", "serve", "--min-warm=0", "--max-procs=1")
    worker = start_worker(settings, "w0", "--time-scale=100")
    try:
        async with Router(bus, "r-accept") as router:
            await registered(router, "w0")
            from heddle.traces import read_trace

            for index, item in enumerate(read_trace(trace_file)):
                await router.submit(item.id, trace_spec(item, index), "w0")
            events = await router.wait_all_finished([t.id for t in traces])
    finally:
        logs = stop_process(worker) + stop_process(executor)
    for item in traces:
        assert step_keys(events, item.id) == expected_keys(3), logs[-3000:]
    assert all(not isinstance(e, Failed) for e in events)


async def test_a_nats_outage_pauses_the_worker_without_losing_a_step(
    settings: Settings, bus: Bus, nats_server: EmbeddedNatsServer
) -> None:
    item = trace("o", [300, 300, 300, 300], tool_s=20.0)  # ~0.1-0.2 s per step at time scale 20
    async with (
        tool_executor(bus),
        agents(settings, ["w0"], time_scale=20.0),
        Router(bus, "r-outage") as router,
    ):
        await router.submit(item.id, trace_spec(item), "w0")
        await router.wait(lambda events: "generation_started1" in step_keys(events, "o"))
        nats_server.stop()
        await asyncio.sleep(1.5)  # steps finish meanwhile; their publishes wait for the server
        nats_server.start()
        events = await router.wait_all_finished([item.id])
    assert step_keys(events, "o") == expected_keys(4)
    assert next(e for e in events if isinstance(e, Completed)).num_output_tokens == 1200


async def test_workers_run_registers_reports_and_stays_up_drained_until_stopped(
    settings: Settings, bus: Bus
) -> None:
    """``heddle workers run 2 --processes``: a parent holding the bus, two ``heddle worker``
    children (the in-process path is the one ``heddle worker`` itself takes). Drained, they
    stay up and heartbeat (registered as drained) until stopped."""
    reports: list[WorkerTelemetry] = []
    reported_by_both = asyncio.Event()

    async def on_telemetry(telemetry: WorkerTelemetry) -> None:
        reports.append(telemetry)
        if {report.worker_id for report in reports} == {"d00", "d01"}:
            reported_by_both.set()

    heartbeats: list[WorkerHeartbeat] = []
    beating_both = asyncio.Event()

    def on_heartbeat(heartbeat: WorkerHeartbeat) -> None:
        heartbeats.append(heartbeat)
        if {beat.worker_id for beat in heartbeats} == {"d00", "d01"}:
            beating_both.set()

    subscription = await bus.subscribe_telemetry(on_telemetry)
    heartbeat_subscription = await bus.subscribe_heartbeats(on_heartbeat)
    workers = start_process(
        settings, "workers", "run", "2", "--id-prefix=d", "--heartbeat-s=0.3",
        "--telemetry-s=0.1", "--processes",
        "--engine=sim", "--time-scale=1000", "--model=qwen3-14b",
    )  # fmt: skip
    try:
        router = Router(bus, "r-drain")
        for worker_id in ("d00", "d01"):
            await registered(router, worker_id)
        await asyncio.wait_for(beating_both.wait(), STARTUP_TIMEOUT_S)
        await asyncio.wait_for(reported_by_both.wait(), STARTUP_TIMEOUT_S)
        for worker_id in ("d00", "d01"):
            await bus.publish(
                Drain(command_id=f"drain-{worker_id}", issued_at=0.0, worker_id=worker_id)
            )
        for worker_id in ("d00", "d01"):
            await registered(router, worker_id, kind="drained")
        # still up after the drain: heartbeats keep coming (on core NATS)
        beats = Counter(beat.worker_id for beat in heartbeats)
        deadline = asyncio.get_running_loop().time() + STARTUP_TIMEOUT_S
        while any(
            Counter(beat.worker_id for beat in heartbeats)[w] < beats[w] + 2 for w in ("d00", "d01")
        ):
            assert asyncio.get_running_loop().time() < deadline, "no heartbeat after the drain"
            await asyncio.sleep(0.1)
        assert workers.poll() is None, "a drained worker exited"
    finally:
        logs = stop_process(workers)
        await subscription.close()
        await heartbeat_subscription.unsubscribe()
    assert workers.returncode in (0, -signal.SIGTERM), logs[-3000:]
    query = ReplayQuery(filter_subjects=("heddle.evt.worker.>",))
    worker_events = [record.message async for record in bus.replay_events(query)]
    registrations = [e for e in worker_events if isinstance(e, WorkerRegistered)]
    assert {(e.worker_id, e.engine, e.model, e.can_export_kv) for e in registrations} == {
        ("d00", "sim", "qwen3-14b", False),  # the default engine model, sglang: no KV export
        ("d01", "sim", "qwen3-14b", False),
    }
    assert all(e.max_kv_tokens > 0 and e.incarnation for e in registrations)
    drained = {e.worker_id for e in worker_events if isinstance(e, WorkerDrained)}
    assert drained == {"d00", "d01"}
    assert {beat.worker_id for beat in heartbeats} == drained
    assert not [e for e in worker_events if isinstance(e, WorkerHeartbeat)]  # core NATS only
    assert {report.worker_id for report in reports} == drained


async def test_a_worker_retrying_its_registration_stops_when_told(
    settings: Settings, nats_server: EmbeddedNatsServer
) -> None:
    """No stream stores the registration (the server answers "no responders"), so the worker
    retries it: a stop (SIGTERM) must end that, where it used to wait forever."""
    publish = dataclasses.replace(AGENT_PUBLISH, ack_timeout_s=1.0)
    options = BusOptions(provision=False, publish=publish)
    async with Bus(settings, options) as bare:
        ports = BusPorts(bare)
        config = WorkerConfig(worker_id="w0", heartbeat_s=0.5)
        engine = SimulatedEngine(SimulatedEngineOptions(time_scale=100.0))
        agent = WorkerAgent(config, engine, sink=ports, history=ports, blobs=ports)
        stop = asyncio.Event()
        serving = asyncio.create_task(serve(agent, bare, stop))
        async with asyncio.timeout(STARTUP_TIMEOUT_S):
            while True:
                if agent.publisher.num_retries:  # the registration is being retried
                    break
                await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(serving, timeout=STARTUP_TIMEOUT_S)
