"""The data plane ``heddle bench control`` plays (``FakeDataPlane``): ``num_workers`` workers of
one trace rollout that answer every command with the trace's next step, move migrating
trajectories at once and heartbeat, timing each tool result -> next command on the way
(``heddle.bench.control`` has the whole measurement).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

from heddle.bus import Bus
from heddle.events import (
    Completed,
    ContinueTrajectory,
    Event,
    Generated,
    GenerationStarted,
    Migrated,
    MigrateOut,
    StartTrajectory,
    ToolCalled,
    ToolReturned,
    WorkerHeartbeat,
    WorkerRegistered,
    decode_worker_command,
)
from heddle.ids import derive_id, epoch_part
from heddle.traces import TraceTrajectory

_TOOL_SHARE = 0.6
"""Share of a step's period spent in its tool call (the rest generates)."""


@dataclass(frozen=True, slots=True)
class BenchOptions:
    num_workers: int = 16
    step_s: float = 10.0
    """Mean wall seconds per step of a trajectory (generation plus tool)."""
    duration_s: float = 60.0
    warmup_s: float = 15.0
    heartbeat_s: float = 2.0
    seed: int = 0


@dataclass(slots=True)
class _Trajectory:
    trace: TraceTrajectory
    worker_id: str = ""
    epoch: int = 0
    """The hosting it runs under (a start's ``epoch``, a move's ``target_epoch``)."""
    next_step: int = 0
    """The step its next start or continuation runs."""


@dataclass(slots=True)
class BenchReport:
    latencies_ms: list[float] = field(default_factory=list)
    num_events: int = 0
    num_commands: int = 0
    num_completed: int = 0
    elapsed_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.latencies_ms)

        def q(p: float) -> float:
            return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else 0.0

        return {
            "num_samples": len(ordered),
            "p50_ms": q(0.5),
            "p90_ms": q(0.9),
            "p99_ms": q(0.99),
            "max_ms": ordered[-1] if ordered else 0.0,
            "events_per_s": self.num_events / self.elapsed_s if self.elapsed_s else 0.0,
            "commands_per_s": self.num_commands / self.elapsed_s if self.elapsed_s else 0.0,
            "num_completed": self.num_completed,
        }


class FakeDataPlane:
    """Plays ``num_workers`` workers of one rollout on ``bus`` (see the module docstring)."""

    def __init__(
        self, bus: Bus, rollout_id: str, trace: list[TraceTrajectory], options: BenchOptions
    ) -> None:
        self.bus = bus
        self.rollout_id = rollout_id
        self.options = options
        self.trajectories = {f"t{i:06d}": _Trajectory(t) for i, t in enumerate(trace)}
        self.report = BenchReport()
        self._rng = random.Random(options.seed)
        self._returned_at: dict[tuple[str, int], float] = {}
        self._num_unstarted = len(self.trajectories)
        self.all_started_at: float | None = None
        """When the last trajectory received its first command (``time.perf_counter()``)."""
        self.is_measuring = False
        """Whether the warm-up is over (latency samples are kept)."""
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def worker_ids(self) -> list[str]:
        return [f"w{index:02d}" for index in range(self.options.num_workers)]

    async def register(self) -> None:
        await self.bus.publish_many(
            WorkerRegistered(
                event_id=derive_id(worker_id, "bench", "registered"),
                occurred_at=time.time(),
                worker_id=worker_id,
                engine="bench",
                tp_degree=1,
                incarnation="bench",
            )
            for worker_id in self.worker_ids
        )

    async def heartbeats(self) -> None:
        sequence = 0
        while True:
            sequence += 1
            for worker_id in self.worker_ids:  # core NATS, like real workers' heartbeats
                await self.bus.publish_telemetry(
                    WorkerHeartbeat(
                        event_id=derive_id(worker_id, "bench", "heartbeat", sequence),
                        occurred_at=time.time(),
                        worker_id=worker_id,
                        sequence=sequence,
                    )
                )
            await asyncio.sleep(self.options.heartbeat_s)

    def on_command(self, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        """Core-NATS sink of ``heddle.cmd.worker.>`` (runs in the client's read loop)."""
        now = time.perf_counter()
        command = decode_worker_command(data)
        self.report.num_commands += 1
        match command:
            case StartTrajectory() | ContinueTrajectory():
                trajectory = self.trajectories.get(command.traj_id)
                if trajectory is None or command.rollout_id != self.rollout_id:
                    return
                step = trajectory.next_step
                if isinstance(command, ContinueTrajectory):
                    step = command.step
                returned = self._returned_at.pop((command.traj_id, step), None)
                if returned is not None and self.is_measuring:
                    self.report.latencies_ms.append((now - returned) * 1000.0)
                if not trajectory.worker_id:
                    self._num_unstarted -= 1
                    if not self._num_unstarted:
                        self.all_started_at = now
                trajectory.worker_id = command.worker_id
                if isinstance(command, StartTrajectory):
                    trajectory.epoch = command.epoch
                self._spawn(self._run_step(command.traj_id, trajectory, step))
            case MigrateOut():
                trajectory = self.trajectories.get(command.traj_id)
                if trajectory is not None:
                    migrated = self._migrated(command, trajectory.epoch)
                    trajectory.worker_id = command.target_worker_id
                    trajectory.epoch = command.target_epoch
                    self._spawn(self._publish([migrated]))

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_step(self, traj_id: str, trajectory: _Trajectory, step: int) -> None:
        period_s = self.options.step_s * self._rng.uniform(0.5, 1.5)
        await asyncio.sleep(period_s * (1 - _TOOL_SHARE))
        trace_step = trajectory.trace.steps[step]
        rollout_id, worker_id, now = self.rollout_id, trajectory.worker_id, time.time()
        epoch = trajectory.epoch
        hosting = epoch_part(epoch)
        events: list[Event] = [
            GenerationStarted(
                event_id=derive_id(rollout_id, traj_id, step, hosting, "generation_started"),
                rollout_id=rollout_id, traj_id=traj_id, step=step, occurred_at=now,
                worker_id=worker_id, num_context_tokens=1, epoch=epoch,
            ),
            Generated(
                event_id=derive_id(rollout_id, traj_id, step, hosting, "generated"),
                rollout_id=rollout_id, traj_id=traj_id, step=step, occurred_at=now,
                worker_id=worker_id, output_token_ids=[1] * trace_step.output_tokens,
                epoch=epoch,
            ),
        ]  # fmt: skip
        if step == len(trajectory.trace.steps) - 1:
            events.append(self._completed(traj_id, trajectory, now))
            await self._publish(events)
            self.report.num_completed += 1
            return
        events.append(
            ToolCalled(
                event_id=derive_id(rollout_id, traj_id, step, hosting, "tool_called"),
                rollout_id=rollout_id, traj_id=traj_id, step=step, occurred_at=now,
                worker_id=worker_id, call_id=f"{traj_id}-{step}", tool="trace", epoch=epoch,
            )
        )  # fmt: skip
        await self._publish(events)
        del events  # not held through the tool call: 6400 live steps' token lists add up
        await asyncio.sleep(period_s * _TOOL_SHARE)
        returned = ToolReturned(
            event_id=derive_id(rollout_id, traj_id, step, "tool_returned"),
            rollout_id=rollout_id,
            traj_id=traj_id,
            step=step,
            occurred_at=time.time(),
            call_id=f"{traj_id}-{step}",
            tool="trace",
            status="ok",
            output_token_ids=[2] * trace_step.tool_output_tokens,
            duration_s=trace_step.tool_s,
        )
        trajectory.next_step = step + 1
        self._returned_at[(traj_id, step + 1)] = time.perf_counter()  # sent: the clock starts
        await self._publish([returned])

    def _completed(self, traj_id: str, trajectory: _Trajectory, now: float) -> Completed:
        steps = trajectory.trace.steps
        return Completed(
            event_id=derive_id(self.rollout_id, traj_id, "completed"),
            rollout_id=self.rollout_id,
            occurred_at=now,
            traj_id=traj_id,
            num_steps=len(steps),
            num_output_tokens=sum(step.output_tokens for step in steps),
            worker_history=[trajectory.worker_id],
            worker_id=trajectory.worker_id,
            epoch=trajectory.epoch,
        )

    def _migrated(self, command: MigrateOut, epoch: int) -> Migrated:
        return Migrated(
            event_id=derive_id(command.migration_id, "migrated"),
            rollout_id=command.rollout_id,
            occurred_at=time.time(),
            traj_id=command.traj_id,
            source_worker_id=command.worker_id,
            target_worker_id=command.target_worker_id,
            epoch=epoch,
            target_epoch=command.target_epoch,
        )

    async def _publish(self, events: list[Event]) -> None:
        await self.bus.publish_many(events)
        self.report.num_events += len(events)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
