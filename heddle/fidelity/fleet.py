"""A synthetic fleet of rollout workers that drives a real control plane, for measuring its
overhead: the time from a step event to the command it causes.

The fleet registers workers (and keeps them alive with heartbeats), then plays every hosted
trajectory the way a worker agent would, with the step lengths of a trace but no engine: on a
``StartTrajectory``/``ContinueTrajectory`` it publishes the step's ``GenerationStarted``,
``Generated`` and ``ToolCalled`` (paced by a global rate), and ``tool_wall_s`` later the
``ToolReturned`` that the control plane routes into the next step's command. The measured
latency is from just before ``ToolReturned`` is published to the moment the resulting
``ContinueTrajectory`` (or ``StartTrajectory`` on another worker) arrives on the fleet's
subscription to ``heddle.cmd.worker.>``: both ends on this process's monotonic clock, so no
clock skew enters. ``MigrateOut`` is honoured at the trajectory's next tool gap (``Migrated``),
as a worker would; a trajectory never plays its last step, so every one stays live.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from heddle.events import (
    ContinueTrajectory,
    Event,
    Generated,
    GenerationStarted,
    Migrated,
    MigrateOut,
    StartTrajectory,
    ToolCalled,
    ToolReturned,
    WorkerCommandT,
    WorkerHeartbeat,
    WorkerRegistered,
)
from heddle.ids import derive_id, trajectory_id
from heddle.traces import TraceTrajectory

Publish = Callable[[Sequence[Event]], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class FleetConfig:
    num_workers: int = 16
    steps_per_s: float = 200.0
    """Tool returns (measured steps) per wall second over the whole fleet."""
    tool_wall_s: float = 0.05
    """Wall time between a step's ``ToolCalled`` and its ``ToolReturned``."""
    heartbeat_s: float = 1.0
    model: str = "qwen3-8b"
    max_kv_tokens: int = 0

    def __post_init__(self) -> None:
        if self.num_workers < 1 or not self.steps_per_s > 0 or not self.tool_wall_s >= 0:
            raise ValueError("need num_workers >= 1, steps_per_s > 0 and tool_wall_s >= 0")


@dataclass(slots=True)
class _Trajectory:
    traj_id: str
    trace: TraceTrajectory
    worker_id: str = ""
    step: int = 0
    """The step it runs next."""
    context_tokens: int = 0
    migrate_to: str = ""


@dataclass(slots=True)
class FleetStats:
    latencies_s: list[float] = field(default_factory=list)
    """Step event -> command, in arrival order."""
    commands: Counter[str] = field(default_factory=Counter)
    num_started: int = 0
    num_steps_published: int = 0
    num_migrations: int = 0
    first_start_at: float | None = None
    all_started_at: float | None = None


class SyntheticFleet:
    """Plays ``trace`` (trajectory ``i`` is ``trajectory_id(i)``) on synthetic workers."""

    def __init__(
        self,
        rollout_id: str,
        trace: Sequence[TraceTrajectory],
        publish: Publish,
        config: FleetConfig | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.rollout_id = rollout_id
        self.config = config or FleetConfig()
        self.publish = publish
        self.clock = clock
        self.trajectories: dict[str, _Trajectory] = {
            trajectory_id(i): _Trajectory(trajectory_id(i), t, context_tokens=t.prompt_tokens)
            for i, t in enumerate(trace)
        }
        self.worker_ids = [f"w{index:02d}" for index in range(self.config.num_workers)]
        self.stats = FleetStats()
        self.ready: deque[str] = deque()
        self._waiting: dict[str, float] = {}
        """Trajectories whose ToolReturned is out -> when it was published (clock)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self.is_measuring = False

    # ---- workers ----------------------------------------------------------------------------

    def registrations(self, now: float) -> list[WorkerRegistered]:
        return [
            WorkerRegistered(
                event_id=derive_id(worker_id, "fleet", "registered"),
                occurred_at=now,
                worker_id=worker_id,
                engine="synthetic",
                model=self.config.model,
                max_kv_tokens=self.config.max_kv_tokens,
                incarnation="fleet",
            )
            for worker_id in self.worker_ids
        ]

    async def run_heartbeats(self, stop: asyncio.Event) -> None:
        sequence = 0
        while not stop.is_set():
            sequence += 1
            now = time.time()
            await self.publish(
                [
                    WorkerHeartbeat(
                        event_id=derive_id(worker_id, "fleet", "heartbeat", sequence),
                        occurred_at=now,
                        worker_id=worker_id,
                        sequence=sequence,
                    )
                    for worker_id in self.worker_ids
                ]
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.heartbeat_s)

    # ---- commands ---------------------------------------------------------------------------

    def on_command(self, command: WorkerCommandT) -> None:
        """A command published by the control plane (called from the subscription)."""
        now = self.clock()
        self.stats.commands[type(command).__name__] += 1
        match command:
            case StartTrajectory() | ContinueTrajectory():
                self._on_run(command, now)
            case MigrateOut():
                trajectory = self.trajectories.get(command.traj_id)
                if trajectory is not None and command.rollout_id == self.rollout_id:
                    trajectory.migrate_to = command.target_worker_id

    def _on_run(self, command: StartTrajectory | ContinueTrajectory, now: float) -> None:
        trajectory = self.trajectories.get(command.traj_id)
        if trajectory is None or command.rollout_id != self.rollout_id:
            return
        trajectory.worker_id = command.worker_id
        sent_at = self._waiting.pop(command.traj_id, None)
        if sent_at is not None:
            if self.is_measuring:
                self.stats.latencies_s.append(now - sent_at)
        elif isinstance(command, StartTrajectory) and not command.resume:
            self.stats.num_started += 1
            self.stats.first_start_at = self.stats.first_start_at or now
            if self.stats.num_started == len(self.trajectories):
                self.stats.all_started_at = now
        if trajectory.step < len(trajectory.trace.steps) - 1:
            self.ready.append(command.traj_id)  # never its last step: it stays live

    # ---- steps ------------------------------------------------------------------------------

    async def drive(self, stop: asyncio.Event) -> None:
        """Start one step every 1/steps_per_s seconds (of a ready trajectory) until ``stop``."""
        interval_s = 1.0 / self.config.steps_per_s
        next_at = self.clock()
        while not stop.is_set():
            if self.ready:
                traj_id = self.ready.popleft()
                self._spawn(self._play_step(self.trajectories[traj_id]))
            next_at += interval_s
            delay_s = next_at - self.clock()
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            else:
                await asyncio.sleep(0)  # behind schedule: catch up, but let callbacks run
                next_at = max(next_at, self.clock() - 1.0)
        await self.close()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _play_step(self, trajectory: _Trajectory) -> None:
        events = self._step_events(trajectory, time.time())
        await self.publish(events)
        self.stats.num_steps_published += 1
        await asyncio.sleep(self.config.tool_wall_s)
        returned = self._tool_returned(trajectory, time.time())
        trajectory.step += 1
        self._waiting[trajectory.traj_id] = self.clock()
        await self.publish([returned])

    def _step_events(self, t: _Trajectory, now: float) -> list[Event]:
        step, (rollout_id, traj_id, worker_id) = t.step, (self.rollout_id, t.traj_id, t.worker_id)
        observation = t.trace.steps[step - 1].tool_output_tokens if step else 0
        num_output = t.trace.steps[step].output_tokens
        t.context_tokens += observation
        started = GenerationStarted(
            event_id=derive_id(rollout_id, traj_id, step, "generation_started"),
            rollout_id=rollout_id,
            traj_id=traj_id,
            worker_id=worker_id,
            occurred_at=now,
            step=step,
            input_token_ids=[0] * observation,
            num_context_tokens=t.context_tokens,
        )
        t.context_tokens += num_output
        generated = Generated(
            event_id=derive_id(rollout_id, traj_id, step, "generated"),
            rollout_id=rollout_id,
            traj_id=traj_id,
            worker_id=worker_id,
            occurred_at=now,
            step=step,
            output_token_ids=[1] * num_output,
            output_logprobs=[-0.5] * num_output,
            finish_reason="tool_call",
            num_context_tokens=t.context_tokens,
        )
        called = ToolCalled(
            event_id=derive_id(rollout_id, traj_id, step, "tool_called"),
            rollout_id=rollout_id,
            traj_id=traj_id,
            worker_id=worker_id,
            occurred_at=now,
            step=step,
            call_id=derive_id(rollout_id, traj_id, step, "call"),
            tool="trace",
        )
        events: list[Event] = [started, generated, called]
        if t.migrate_to and t.migrate_to != t.worker_id:
            events.append(self._migrated(t, now))
        return events

    def _migrated(self, t: _Trajectory, now: float) -> Migrated:
        source, t.worker_id, t.migrate_to = t.worker_id, t.migrate_to, ""
        self.stats.num_migrations += 1
        return Migrated(
            event_id=derive_id(*self._ids(t), t.step, source, t.worker_id, "migrated"),
            rollout_id=self.rollout_id,
            traj_id=t.traj_id,
            occurred_at=now,
            source_worker_id=source,
            target_worker_id=t.worker_id,
            num_context_tokens=t.context_tokens,
        )

    def _tool_returned(self, t: _Trajectory, now: float) -> ToolReturned:
        step = t.step
        trace_step = t.trace.steps[step]
        return ToolReturned(
            event_id=derive_id(*self._ids(t), step, "tool_returned"),
            rollout_id=self.rollout_id,
            traj_id=t.traj_id,
            occurred_at=now,
            step=step,
            call_id=derive_id(*self._ids(t), step, "call"),
            tool="trace",
            status="ok",
            output_token_ids=[0] * trace_step.tool_output_tokens,
            duration_s=trace_step.tool_s,
            executor_id="fleet",
        )

    def _ids(self, t: _Trajectory) -> tuple[str, str]:
        return (self.rollout_id, t.traj_id)
