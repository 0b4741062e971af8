"""The worker agent's logic with real sim engines and environments over an in-memory bus.

The in-memory bus (a fake of the transport, allowed in these unit tests) stores messages with
JetStream's de-duplication by id, one by one or pipelined (both sink kinds are run); the
harness plays the tool executor (trace tools) and the control plane's router
(ContinueTrajectory to the trajectory's worker on each tool result). Real-NATS behaviour is
covered by test_agent_nats.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest
from events_factory import continue_after

from heddle.events import (
    Abort,
    Completed,
    ContinueTrajectory,
    Drain,
    Event,
    EventT,
    Failed,
    Generated,
    GenerationStarted,
    Migrated,
    MigrateOut,
    Preempt,
    Preempted,
    Reprioritize,
    StartTrajectory,
    ToolCall,
    ToolCalled,
    ToolReturned,
    TraceTool,
    TrajectoryEvent,
    TrajectoryPhase,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
    Undrain,
    WorkerCommand,
    WorkerDrained,
    WorkerFailed,
    WorkerHeartbeat,
    WorkerRegistered,
    WorkerTelemetry,
)
from heddle.ids import derive_id
from heddle.workers.agent import WorkerAgent, WorkerConfig, WorkerFailing, WorkerStopping
from heddle.workers.agent.decisions import Mode
from heddle.workers.agent.errors import CommandRefused
from heddle.workers.engines.base import EngineError, GenerationRequest, GenerationResult
from heddle.workers.engines.simulated import SimulatedEngine, SimulatedEngineOptions
from heddle.workers.tools.trace import pseudo_token_ids

R = "r1"
FAST = 5000.0


class MemoryBus:
    """Messages in publish order, de-duplicated by id like JetStream's duplicate window."""

    def __init__(self) -> None:
        self.messages: list[Event | WorkerCommand | ToolCall] = []
        self.telemetry: list[WorkerTelemetry | WorkerHeartbeat] = []
        self.blobs: dict[str, bytes] = {}
        self.num_failures_to_inject = 0
        self.listeners: list[Any] = []
        self._ids: set[str] = set()

    async def publish(self, message: Event | WorkerCommand | ToolCall) -> None:
        if self.num_failures_to_inject > 0:
            self.num_failures_to_inject -= 1
            raise ConnectionError("connection lost (injected)")
        await self.store(message)

    async def store(self, message: Event | WorkerCommand | ToolCall) -> None:
        """Publish without fault injection (the harness's own messages)."""
        key = message.event_id if isinstance(message, Event) else message.command_id
        if key in self._ids:
            return
        self._ids.add(key)
        self.messages.append(message)
        for listener in self.listeners:
            listener(message)

    async def publish_telemetry(self, telemetry: WorkerTelemetry | WorkerHeartbeat) -> None:
        self.telemetry.append(telemetry)

    async def trajectory_events(self, rollout_id: str, traj_id: str) -> list[EventT]:
        return [
            cast(EventT, m)
            for m in self.messages
            if isinstance(m, TrajectoryEvent) and (m.rollout_id, m.traj_id) == (rollout_id, traj_id)
        ]

    async def put_blob(self, key: str, data: bytes) -> None:
        self.blobs[key] = data

    async def get_blob(self, key: str) -> bytes:
        return self.blobs[key]

    async def delete_blob(self, key: str) -> None:
        self.blobs.pop(key, None)

    def events_of(self, traj_id: str) -> list[TrajectoryEvent]:
        return [m for m in self.messages if isinstance(m, TrajectoryEvent) and m.traj_id == traj_id]


class PipeliningMemoryBus(MemoryBus):
    """A memory bus that also pipelines (``BatchSink``); an injected failure stores the first
    message of the batch and loses the rest, as a connection dropped mid-write would."""

    async def publish_many(self, messages: Sequence[Event | WorkerCommand | ToolCall]) -> None:
        if self.num_failures_to_inject > 0:
            self.num_failures_to_inject -= 1
            if messages:
                await self.store(messages[0])
            raise ConnectionError("connection lost mid-batch (injected)")
        for message in messages:
            await self.store(message)


class Harness:
    """Plays the tool executor and the router over the memory bus for a set of agents."""

    def __init__(
        self, bus: MemoryBus, *, route_tool_results: bool = True, follow_migrations: bool = True
    ) -> None:
        self.bus = bus
        self.follow_migrations = follow_migrations
        self.agents: dict[str, WorkerAgent] = {}
        self.placement: dict[str, str] = {}
        self.route_tool_results = route_tool_results
        self.tasks: list[asyncio.Task[None]] = []
        self.errors: list[BaseException] = []
        bus.listeners.append(self._on_message)

    async def add_worker(
        self, worker_id: str, engine: Any = None, *, time_scale: float = FAST, **options: Any
    ) -> WorkerAgent:
        # The torch engine model by default: these tests are about the agent's KV transfer.
        options.setdefault("engine_model", "torch")
        engine = engine or SimulatedEngine(SimulatedEngineOptions(time_scale=time_scale, **options))
        agent = WorkerAgent(
            WorkerConfig(worker_id=worker_id, heartbeat_s=0.05, telemetry_s=0.05),
            engine,
            sink=self.bus,
            history=self.bus,
            blobs=self.bus,
        )
        await agent.start()
        self.agents[worker_id] = agent
        return agent

    def deliver(self, command: WorkerCommand, *, is_redelivered: bool = False) -> None:
        agent = self.agents.get(command.worker_id)
        if agent is not None:
            self.tasks.append(asyncio.create_task(self._handle(agent, command, is_redelivered)))

    async def _handle(self, agent: WorkerAgent, command: Any, is_redelivered: bool) -> None:
        try:
            await agent.handle(command, is_redelivered=is_redelivered)
        except (WorkerFailing, WorkerStopping):
            pass  # not acknowledged: the transport would leave it to a later delivery
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)
            raise

    def _on_message(self, message: Any) -> None:
        if isinstance(message, ToolCall):
            self.tasks.append(asyncio.create_task(self._run_tool(message)))
        elif isinstance(message, WorkerCommand):
            self.deliver(message)
        elif isinstance(message, Migrated) and self.follow_migrations:
            self.placement[message.traj_id] = message.target_worker_id

    async def _run_tool(self, call: ToolCall) -> None:
        assert isinstance(call.request, TraceTool)
        await asyncio.sleep(call.request.duration_s / call.time_scale)
        result = ToolReturned(
            event_id=derive_id(call.rollout_id, call.traj_id, call.step, "tool_returned"),
            rollout_id=call.rollout_id,
            traj_id=call.traj_id,
            occurred_at=0.0,
            step=call.step,
            call_id=call.call_id,
            tool="trace",
            status="ok",
            output_token_ids=pseudo_token_ids(call.request.seed, call.request.num_output_tokens),
            duration_s=call.request.duration_s,  # model time, as executors report it
        )
        await self.bus.store(result)
        if self.route_tool_results:
            self.deliver(self.continue_command(result))

    def continue_command(self, result: ToolReturned) -> ContinueTrajectory:
        return continue_after(result, self.placement[result.traj_id])

    async def submit(
        self, traj_id: str, worker_id: str, steps: list[dict[str, Any]], **kw: Any
    ) -> StartTrajectory:
        spec = trace_spec(traj_id, steps, **kw)
        await self.bus.store(
            TrajectorySubmitted(
                event_id=derive_id(R, traj_id, "submitted"),
                rollout_id=R,
                traj_id=traj_id,
                occurred_at=0.0,
                spec=spec,
            )
        )
        await self.place(traj_id, worker_id)
        start = StartTrajectory(
            command_id=derive_id(R, traj_id, "start"),
            rollout_id=R,
            issued_at=0.0,
            worker_id=worker_id,
            traj_id=traj_id,
            spec=spec,
        )
        self.deliver(start)
        return start

    async def place(self, traj_id: str, worker_id: str) -> None:
        """What the control plane records before it sends a StartTrajectory."""
        self.placement[traj_id] = worker_id
        await self.bus.store(
            TrajectoryPlaced(
                event_id=derive_id(R, traj_id, "placed", worker_id),
                rollout_id=R,
                traj_id=traj_id,
                occurred_at=0.0,
                worker_id=worker_id,
            )
        )

    async def wait_for(self, predicate: Any, timeout_s: float = 20.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not predicate():
                if self.errors:
                    raise self.errors[0]
                await asyncio.sleep(0.005)

    async def crash_in_a_tool_gap(self, traj_id: str, worker_id: str) -> None:
        """Run ``traj_id`` (``STEPS``) on a new ``worker_id`` until its first tool result is
        stored, then stop that worker: it dies with the trajectory in its tool gap."""
        worker = await self.add_worker(worker_id)
        await self.submit(traj_id, worker_id, STEPS)
        bus = self.bus
        await self.wait_for(
            lambda: any(isinstance(e, ToolReturned) for e in bus.events_of(traj_id))
        )
        await worker.close()
        del self.agents[worker_id]

    async def wait_finished(self, traj_id: str) -> TrajectoryEvent:
        def finished() -> bool:
            return any(
                isinstance(e, (Completed, Failed)) and not (isinstance(e, Failed) and e.retryable)
                for e in self.bus.events_of(traj_id)
            )

        await self.wait_for(finished)
        return next(e for e in self.bus.events_of(traj_id) if isinstance(e, (Completed, Failed)))

    async def close(self) -> None:
        for agent in self.agents.values():
            await agent.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def trace_spec(traj_id: str, steps: list[dict[str, Any]], **kw: Any) -> TrajectorySpec:
    return TrajectorySpec(
        group_id="g",
        index=0,
        environment="trace",
        task={"id": traj_id, "prompt_tokens": 30, "steps": steps},
        **kw,
    )


STEPS: list[dict[str, Any]] = [
    {"output_tokens": 40, "tool_s": 2.0, "tool_output_tokens": 12},
    {"output_tokens": 25, "tool_s": 1.0, "tool_output_tokens": 7},
    {"output_tokens": 10},
]


@pytest.fixture(params=[MemoryBus, PipeliningMemoryBus])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    bus = request.param()
    h = Harness(bus)
    yield h
    await h.close()


def kinds(events: list[TrajectoryEvent]) -> list[str]:
    """kind+step of each step event (placements left out), in order."""
    return [
        type(e).kind_name() + (f"{e.step}" if hasattr(e, "step") else "")
        for e in events
        if not isinstance(e, TrajectoryPlaced)
    ]


EXPECTED_KINDS = [
    "submitted", "generation_started0", "generated0", "tool_called0", "tool_returned0",
    "generation_started1", "generated1", "tool_called1", "tool_returned1",
    "generation_started2", "generated2", "completed",
]  # fmt: skip


async def test_a_trace_runs_end_to_end_with_every_step_in_order(harness: Harness) -> None:
    agent = await harness.add_worker("w0")
    await harness.submit("t1", "w0", STEPS)
    done = await harness.wait_finished("t1")
    assert kinds(harness.bus.events_of("t1")) == EXPECTED_KINDS
    assert isinstance(done, Completed)
    assert done.num_steps == 3 and done.num_output_tokens == 75
    assert len(done.prompt_token_ids) == 30
    assert len(done.response_token_ids) == 75 + 12 + 7
    assert sum(done.loss_mask) == 75
    assert len(done.response_logprobs) == len(done.loss_mask) == len(done.response_token_ids)
    assert done.worker_history == ["w0"] and done.num_recomputed_tokens == 0
    assert done.timings.tool_s == pytest.approx(3.0)
    assert done.timings.decode_s > 0 and done.timings.total_s >= done.timings.tool_s
    started = [e for e in harness.bus.events_of("t1") if isinstance(e, GenerationStarted)]
    assert [len(e.input_token_ids) for e in started] == [30, 12, 7]
    generated = [e for e in harness.bus.events_of("t1") if isinstance(e, Generated)]
    assert [len(e.output_token_ids) for e in generated] == [40, 25, 10]
    assert generated[1].num_context_tokens == 30 + 40 + 12 + 25
    assert agent.table.get(R, "t1") is None  # only a tombstone is left of a finished row
    assert agent.table.phase_of(R, "t1") is TrajectoryPhase.DONE
    registered = [m for m in harness.bus.messages if isinstance(m, WorkerRegistered)]
    assert registered[0].engine == "sim" and registered[0].can_export_kv
    await harness.wait_for(lambda: agent.telemetry.num_heartbeats > 0 and harness.bus.telemetry)


async def test_redelivered_and_duplicate_commands_change_nothing(harness: Harness) -> None:
    await harness.add_worker("w0")
    start = await harness.submit("t1", "w0", STEPS)
    await harness.wait_finished("t1")
    before = list(harness.bus.messages)
    harness.deliver(start, is_redelivered=True)
    harness.deliver(start)
    for result in [e for e in harness.bus.events_of("t1") if isinstance(e, ToolReturned)]:
        harness.deliver(harness.continue_command(result), is_redelivered=True)
    await asyncio.gather(*harness.tasks)
    assert harness.bus.messages == before


async def test_resume_on_another_worker_after_a_crash_in_a_tool_gap() -> None:
    bus = MemoryBus()
    harness = Harness(bus, route_tool_results=False)
    try:
        await harness.crash_in_a_tool_gap("t1", "w0")
        await harness.add_worker("w1")
        await harness.place("t1", "w1")
        spec = trace_spec("t1", STEPS)
        harness.deliver(
            StartTrajectory(
                command_id="re",
                rollout_id=R,
                issued_at=0.0,
                worker_id="w1",
                traj_id="t1",
                spec=spec,
                resume=True,
            )
        )
        harness.route_tool_results = True
        done = await harness.wait_finished("t1")
        assert kinds(bus.events_of("t1")) == EXPECTED_KINDS
        # w0 comes back and gets its old StartTrajectory again: the stream places t1 on w1.
        restarted = await harness.add_worker("w0")
        before = len(bus.messages)
        harness.deliver(
            StartTrajectory(command_id=derive_id(R, "t1", "start"), rollout_id=R, issued_at=0.0,
                            worker_id="w0", traj_id="t1", spec=spec),
            is_redelivered=True,
        )  # fmt: skip
        await asyncio.gather(*harness.tasks)
        assert [m for m in bus.messages[before:] if isinstance(m, TrajectoryEvent)] == []
        assert restarted.table.phase_of(R, "t1") is TrajectoryPhase.ABSENT
        assert isinstance(done, Completed) and done.worker_history == ["w0", "w1"]
        resumed = [e for e in bus.events_of("t1") if isinstance(e, Generated)][1]
        assert resumed.worker_id == "w1"
        assert resumed.num_recomputed_tokens == 30 + 40  # the lost KV: prompt + first output
    finally:
        await harness.close()


async def test_resume_regenerates_a_step_interrupted_mid_generation() -> None:
    bus = MemoryBus()
    harness = Harness(bus)
    try:
        slow = await harness.add_worker("w0", time_scale=50.0)
        await harness.submit("t1", "w0", [{"output_tokens": 20_000}], max_new_tokens=30_000)
        await harness.wait_for(
            lambda: any(isinstance(e, GenerationStarted) for e in bus.events_of("t1"))
        )
        await slow.close()
        del harness.agents["w0"]
        await harness.add_worker("w1")
        await harness.place("t1", "w1")
        harness.deliver(
            StartTrajectory(
                command_id="re",
                rollout_id=R,
                issued_at=0.0,
                worker_id="w1",
                traj_id="t1",
                spec=trace_spec("t1", [{"output_tokens": 20}]),
                resume=True,
            )
        )
        done = await harness.wait_finished("t1")
        assert isinstance(done, Completed)
        assert kinds(bus.events_of("t1")) == [
            "submitted",
            "generation_started0",
            "generated0",
            "completed",
        ]
        generated = next(e for e in bus.events_of("t1") if isinstance(e, Generated))
        assert generated.worker_id == "w1"
    finally:
        await harness.close()


def _command(cls: type[Any], worker_id: str, command_id: str, **fields: Any) -> Any:
    return cls(command_id=command_id, rollout_id=R, issued_at=0.0, worker_id=worker_id, **fields)


async def _migrate_t1_in_a_long_tool_gap(harness: Harness) -> TrajectoryEvent:
    """Run ``t1`` on w0 with a long first tool call, have w0 migrate it to w1 during that call,
    and return its end."""
    long_gap: list[dict[str, Any]] = [
        {"output_tokens": 40, "tool_s": 1500.0, "tool_output_tokens": 12},
        *STEPS[1:],
    ]
    await harness.submit("t1", "w0", long_gap)
    bus = harness.bus
    await harness.wait_for(lambda: any(isinstance(e, ToolCalled) for e in bus.events_of("t1")))
    harness.deliver(
        _command(MigrateOut, "w0", "m-out", traj_id="t1", target_worker_id="w1", migration_id="m1")
    )
    return await harness.wait_finished("t1")


async def test_migration_in_a_tool_gap_moves_the_kv_and_forwards_commands() -> None:
    bus = MemoryBus()
    harness = Harness(bus, follow_migrations=False)  # the router keeps sending to w0
    try:
        await harness.add_worker("w0")
        await harness.add_worker("w1")
        done = await _migrate_t1_in_a_long_tool_gap(harness)
        order = kinds(bus.events_of("t1"))
        assert order.index("migrated") < order.index("tool_returned0")
        migrated = next(e for e in bus.events_of("t1") if isinstance(e, Migrated))
        assert migrated.kv_transferred and migrated.num_bytes == (30 + 40) * 144 * 1024
        assert migrated.transfer_s > 0
        assert isinstance(done, Completed) and done.worker_history == ["w0", "w1"]
        assert done.num_recomputed_tokens == 0  # the imported KV served the prefix
        assert done.timings.migration_s == pytest.approx(migrated.transfer_s)
        second = [e for e in bus.events_of("t1") if isinstance(e, Generated)][1]
        assert second.worker_id == "w1"
        assert not bus.blobs  # the target consumed the KV blob
        # The router's continues went to w0, which forwarded them (through the bus) to w1.
        forwarded = [m for m in bus.messages if isinstance(m, ContinueTrajectory)]
        assert [(m.step, m.worker_id) for m in forwarded] == [(1, "w1"), (2, "w1")]
        assert all(m.command_id.endswith(":fwd:w1") for m in forwarded)
    finally:
        await harness.close()


async def test_migration_on_the_sglang_model_warms_the_target_instead_of_moving_kv() -> None:
    bus = MemoryBus()
    harness = Harness(bus)
    try:
        await harness.add_worker("w0", engine_model="sglang")
        await harness.add_worker("w1", engine_model="sglang")
        done = await _migrate_t1_in_a_long_tool_gap(harness)
        migrated = next(e for e in bus.events_of("t1") if isinstance(e, Migrated))
        assert not migrated.kv_transferred and not bus.blobs
        assert isinstance(done, Completed) and done.worker_history == ["w0", "w1"]
        second = [e for e in bus.events_of("t1") if isinstance(e, Generated)][1]
        # The warm-up (a prefill-only request in the tool gap) cached prompt + first output.
        assert (second.worker_id, second.num_cached_tokens) == ("w1", 30 + 40)
    finally:
        await harness.close()


async def test_migration_requested_while_generating_happens_at_the_gap() -> None:
    bus = MemoryBus()
    harness = Harness(bus)
    try:
        await harness.add_worker("w0", time_scale=100.0)
        await harness.add_worker("w1")
        await harness.submit(
            "t1", "w0", [{"output_tokens": 2000, "tool_s": 0.1}, {"output_tokens": 5}]
        )
        await harness.wait_for(
            lambda: any(isinstance(e, GenerationStarted) for e in bus.events_of("t1"))
        )
        harness.deliver(
            _command(
                MigrateOut,
                "w0",
                "m-out",
                traj_id="t1",
                target_worker_id="w1",
                migration_id="m1",
                transfer_kv=False,
            )
        )
        done = await harness.wait_finished("t1")
        assert isinstance(done, Completed) and done.worker_history == ["w0", "w1"]
        order = kinds(bus.events_of("t1"))
        assert order.index("migrated") == order.index("tool_called0") + 1
        migrated = next(e for e in bus.events_of("t1") if isinstance(e, Migrated))
        assert not migrated.kv_transferred
        assert done.num_recomputed_tokens == 30 + 2000  # re-prefilled at the target
    finally:
        await harness.close()


async def test_preempt_and_reprioritize_reach_the_running_generation(harness: Harness) -> None:
    agent = await harness.add_worker("w0", time_scale=50.0, max_running=1)
    await harness.submit("t1", "w0", [{"output_tokens": 3000}])
    bus = harness.bus
    await harness.wait_for(lambda: agent.table.generating())
    await asyncio.sleep(0.02)
    harness.deliver(_command(Preempt, "w0", "p1", traj_id="t1", by_traj_id="t2"))
    harness.deliver(_command(Reprioritize, "w0", "rp1", traj_id="t1", priority=7.0))
    done = await harness.wait_finished("t1")
    assert isinstance(done, Completed)
    preempted = [e for e in bus.events_of("t1") if isinstance(e, Preempted)]
    assert len(preempted) == 1 and preempted[0].by_traj_id == "t2" and preempted[0].kv_kept
    generated = next(e for e in bus.events_of("t1") if isinstance(e, Generated))
    assert generated.num_preemptions == 1 and len(generated.output_token_ids) == 3000


async def test_abort_fails_the_trajectory_in_any_phase(harness: Harness) -> None:
    agent = await harness.add_worker("w0", time_scale=20.0)
    await harness.submit("t1", "w0", [{"output_tokens": 50_000}], max_new_tokens=60_000)
    await harness.wait_for(lambda: agent.table.generating())
    harness.deliver(_command(Abort, "w0", "a1", traj_id="t1", reason="operator"))
    failed = await harness.wait_finished("t1")
    assert isinstance(failed, Failed) and failed.reason == "aborted: operator"
    assert not failed.retryable
    load = await agent.engine.load()
    assert load.num_running == 0


async def test_drain_refuses_new_work_finishes_hosted_and_reports(harness: Harness) -> None:
    agent = await harness.add_worker("w0", time_scale=500.0)
    await harness.submit("t1", "w0", STEPS)
    await harness.wait_for(lambda: agent.table.hosted())
    harness.deliver(_command(Drain, "w0", "d1"))
    await harness.wait_for(lambda: agent.handler.mode is Mode.DRAINING)
    await harness.submit("t2", "w0", STEPS)
    await harness.wait_for(lambda: agent.drained.is_set())
    assert isinstance(await harness.wait_finished("t1"), Completed)
    await harness.wait_for(lambda: harness.bus.events_of("t2")[-1].kind_name() == "failed")
    refusals = [e for e in harness.bus.events_of("t2") if isinstance(e, Failed)]
    assert len(refusals) == 1 and refusals[0].retryable and "draining" in refusals[0].reason
    drained = [m for m in harness.bus.messages if isinstance(m, WorkerDrained)]
    assert len(drained) == 1


async def test_an_undrained_worker_takes_trajectories_again(harness: Harness) -> None:
    agent = await harness.add_worker("w0", time_scale=500.0)
    harness.deliver(_command(Drain, "w0", "d1"))
    await harness.wait_for(lambda: agent.drained.is_set())
    harness.deliver(_command(Undrain, "w0", "u1"))
    await harness.wait_for(lambda: agent.handler.mode is Mode.SERVING)
    await harness.submit("t1", "w0", STEPS)
    assert isinstance(await harness.wait_finished("t1"), Completed)


async def test_publishes_lost_to_a_dropped_connection_are_retried_without_duplicates(
    harness: Harness,
) -> None:
    await harness.add_worker("w0")
    harness.bus.num_failures_to_inject = 5
    await harness.submit("t1", "w0", STEPS)
    done = await harness.wait_finished("t1")
    assert isinstance(done, Completed)
    assert kinds(harness.bus.events_of("t1")) == EXPECTED_KINDS
    assert harness.agents["w0"].publisher.num_retries >= 5


class BrokenEngine(SimulatedEngine):
    async def generate(self, request: GenerationRequest) -> GenerationResult:
        raise EngineError("device lost")


async def test_an_engine_failure_reports_the_hosted_trajectories(harness: Harness) -> None:
    engine = BrokenEngine(SimulatedEngineOptions(time_scale=FAST))
    agent = await harness.add_worker("w0", engine=engine)
    start = await harness.submit("t1", "w0", STEPS)
    await harness.wait_for(lambda: agent.failed.is_set())
    await harness.wait_for(lambda: any(isinstance(m, WorkerFailed) for m in harness.bus.messages))
    failure = next(m for m in harness.bus.messages if isinstance(m, WorkerFailed))
    assert failure.trajectory_ids == ["t1"] and "device lost" in failure.reason
    with pytest.raises(WorkerFailing):
        await agent.handle(start)
    assert not any(isinstance(e, (Completed, Failed)) for e in harness.bus.events_of("t1"))


async def test_bad_tasks_fail_and_unknown_trajectories_are_refused(harness: Harness) -> None:
    await harness.add_worker("w0")
    bad = TrajectorySpec(group_id="g", index=0, environment="trace", task={"id": "x"})
    harness.deliver(_command(StartTrajectory, "w0", "s-bad", traj_id="t1", spec=bad))
    failed = await harness.wait_finished("t1")
    assert isinstance(failed, Failed) and "prompt_tokens" in failed.reason
    nowhere = TrajectorySpec(group_id="g", index=0, environment="chess")
    harness.deliver(_command(StartTrajectory, "w0", "s-env", traj_id="t2", spec=nowhere))
    failed = await harness.wait_finished("t2")
    assert isinstance(failed, Failed) and "unknown environment 'chess'" in failed.reason
    result = ToolReturned(
        event_id="x",
        rollout_id=R,
        traj_id="t3",
        occurred_at=0.0,
        step=0,
        call_id="c",
        tool="trace",
        status="ok",
    )
    # A command naming a trajectory the stream does not know is refused (the transport
    # dead-letters it): no event about t3 is published, so no phantom row appears anywhere.
    agent = harness.agents["w0"]
    for command in (
        _command(ContinueTrajectory, "w0", "c3", traj_id="t3", step=1, tool_result=result),
        _command(Abort, "w0", "a3", traj_id="t3", reason="typo"),
    ):
        with pytest.raises(CommandRefused, match="unknown trajectory"):
            await agent.handle(command)
    assert harness.bus.events_of("t3") == []


async def test_step_and_context_caps_truncate_with_their_finish_reasons(harness: Harness) -> None:
    await harness.add_worker("w0")
    await harness.submit("t1", "w0", STEPS, max_steps=2)
    done = await harness.wait_finished("t1")
    assert isinstance(done, Completed) and done.finish_reason == "max_steps" and done.num_steps == 2
    await harness.submit("t2", "w0", STEPS, max_total_tokens=80)
    done = await harness.wait_finished("t2")
    assert isinstance(done, Completed) and done.finish_reason == "length"
    assert done.num_steps == 1


async def test_a_call_lost_between_tool_called_and_the_command_is_sent_on_resume() -> None:
    bus = MemoryBus()
    harness = Harness(bus, route_tool_results=False)
    try:
        await harness.crash_in_a_tool_gap("t1", "w0")
        # The stream as a worker that died right after storing ToolCalled would leave it.
        kept = [m for m in bus.messages if not isinstance(m, (ToolCall, ToolReturned))]
        bus.messages = list(kept)
        bus._ids = {m.event_id if isinstance(m, Event) else m.command_id for m in kept}
        await harness.add_worker("w1")
        await harness.place("t1", "w1")
        harness.route_tool_results = True
        harness.deliver(
            _command(StartTrajectory, "w1", "re", traj_id="t1", spec=trace_spec("t1", STEPS),
                     resume=True)
        )  # fmt: skip
        done = await harness.wait_finished("t1")
        assert isinstance(done, Completed)
        assert kinds(bus.events_of("t1")) == EXPECTED_KINDS
        calls = [m for m in bus.messages if isinstance(m, ToolCall)]
        assert [c.call_id for c in calls] == [
            derive_id(R, "t1", 0, "call"),
            derive_id(R, "t1", 1, "call"),
        ]
    finally:
        await harness.close()
