"""``heddle bench control``: the control plane's reaction time under a paper-scale load.

The control plane runs as it is deployed (``heddle up``, a child process); this process plays
the data plane of ``num_workers`` workers hosting a rollout of ``num_trajectories`` trace
trajectories: it answers every ``StartTrajectory`` / ``ContinueTrajectory`` with a step
(``GenerationStarted``, ``Generated`` with the trace's output tokens, then ``ToolCalled`` or, at
the end, ``Completed``), returns the tool (``ToolReturned``) after the step's tool share of
``step_s``, moves migrating trajectories at once (``Migrated``) and heartbeats for every worker.

Measured after the warm-up: ``warmup_s``, and until every trajectory has received its first
command (the initial placement burst: its length is reported as ``initial_placement_s``),
for ``duration_s - warmup_s``:

- by the control plane itself (``control_plane`` in the report, from its status file's
  cumulative histograms at the end of the warm-up and at the end): the *decision latency*, from
  an event's arrival at the control plane to its outputs (commands, derived events) stored, and
  the *consumer age*, from an event being stored in the stream to the control plane deciding it;
  p50/p99/max of both, and the events it decided per second;
- by the player, end to end (``p50_ms`` ...): from just before a ``ToolReturned`` is published to
  the ``ContinueTrajectory`` (or re-placing ``StartTrajectory``) for the next step arriving at
  the worker's subject, observed on core NATS (JetStream delivers stored messages to plain
  subscribers too). This adds the player's own publishing and event-loop delays, and nats-server
  storing and delivering two messages, to the control plane's decision.

The 1-minute load average is recorded at the start, after the warm-up and at the end. The control
plane decides only this run's events (``since_sequence``): a data dir's earlier runs are
neither replayed nor decided.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec

from heddle.bus import Bus, BusOptions
from heddle.config import Settings
from heddle.consumers import ControlPlaneConfig, ControlPlaneStatus, read_status
from heddle.consumers.latency import minus, quantile_ms
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
from heddle.ids import derive_id
from heddle.rollout.deployment import LocalDeployment, delete_control_durables
from heddle.rollout.runner import cancel_rollout
from heddle.rollout.submission import RolloutPlan, new_rollout_id, submit, trace_specs
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
                self._spawn(self._run_step(command.traj_id, trajectory, step))
            case MigrateOut():
                trajectory = self.trajectories.get(command.traj_id)
                if trajectory is not None:
                    trajectory.worker_id = command.target_worker_id
                    self._spawn(self._publish([self._migrated(command)]))

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_step(self, traj_id: str, trajectory: _Trajectory, step: int) -> None:
        period_s = self.options.step_s * self._rng.uniform(0.5, 1.5)
        await asyncio.sleep(period_s * (1 - _TOOL_SHARE))
        trace_step = trajectory.trace.steps[step]
        rollout_id, worker_id, now = self.rollout_id, trajectory.worker_id, time.time()
        events: list[Event] = [
            GenerationStarted(
                event_id=derive_id(rollout_id, traj_id, step, "generation_started"),
                rollout_id=rollout_id, traj_id=traj_id, step=step, occurred_at=now,
                worker_id=worker_id, num_context_tokens=1,
            ),
            Generated(
                event_id=derive_id(rollout_id, traj_id, step, "generated"),
                rollout_id=rollout_id, traj_id=traj_id, step=step, occurred_at=now,
                worker_id=worker_id, output_token_ids=[1] * trace_step.output_tokens,
            ),
        ]  # fmt: skip
        if step == len(trajectory.trace.steps) - 1:
            events.append(self._completed(traj_id, trajectory, now))
            await self._publish(events)
            self.report.num_completed += 1
            return
        events.append(
            ToolCalled(
                event_id=derive_id(rollout_id, traj_id, step, "tool_called"),
                rollout_id=rollout_id, traj_id=traj_id, step=step, occurred_at=now,
                worker_id=worker_id, call_id=f"{traj_id}-{step}", tool="trace",
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
        )

    def _migrated(self, command: MigrateOut) -> Migrated:
        return Migrated(
            event_id=derive_id(command.migration_id, "migrated"),
            rollout_id=command.rollout_id,
            occurred_at=time.time(),
            traj_id=command.traj_id,
            source_worker_id=command.worker_id,
            target_worker_id=command.target_worker_id,
        )

    async def _publish(self, events: list[Event]) -> None:
        await self.bus.publish_many(events)
        self.report.num_events += len(events)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def run_control_bench(
    settings: Settings,
    trace: list[TraceTrajectory],
    options: BenchOptions,
    control: ControlPlaneConfig,
    log_dir: Path,
    policy: str = "heddle",
) -> dict[str, Any]:
    """Start the control plane, play the data plane for ``duration_s``, report."""
    rollout_id = new_rollout_id()
    load = os.getloadavg()[0]
    async with Bus(settings, BusOptions(name="heddle-bench-control")) as bus:
        # Only this run's events: a data dir's earlier runs are neither replayed nor decided.
        since = (await bus.stream_state()).last_sequence + 1
        control = replace(control, host=replace(control.host, since_sequence=since))
        deployment = LocalDeployment(bus, log_dir)
        try:
            await deployment.start_control_plane(control)
            plane = FakeDataPlane(bus, rollout_id, trace, options)
            # One process plays 16 workers' 6400 trajectories: its full collections (~0.4 s
            # every ~4 s, each step's task surviving to the oldest generation) would stall
            # every worker at once, then send the control plane a burst no fleet of workers
            # sends. The run is short: no cycle collection in the player until it ends.
            gc.freeze()
            gc.disable()
            subscription = await bus.client.subscribe_sink("heddle.cmd.worker.>", plane.on_command)
            await plane.register()
            beating = asyncio.create_task(plane.heartbeats())
            started = time.perf_counter()
            await submit(bus, RolloutPlan(policy, trace_specs(trace), "bench"), rollout_id)
            window = await _measure(plane, settings.data_dir, started)
            plane.report.elapsed_s = time.perf_counter() - started
            beating.cancel()
            await subscription.close()
            await plane.close()
            await cancel_rollout(bus, rollout_id, "benchmark over")
        finally:
            gc.enable()
            await deployment.stop()
            await delete_control_durables(bus, control.host.durable_prefix)
    status = window.final
    document = plane.report.summary()
    document["load_avg_1m"] = [load, *window.loads]
    document["initial_placement_s"] = window.initial_placement_s
    document["measured_s"] = window.seconds
    document["control_plane"] = plane_figures(window)
    document["num_trajectories"] = len(trace)
    document["num_workers"] = options.num_workers
    document["step_s"] = options.step_s
    document["duration_s"] = options.duration_s
    histograms = ("ages", "decisions")  # summarised in "control_plane"
    document["consumers"] = [
        {k: v for k, v in msgspec.to_builtins(c).items() if k not in histograms}
        for c in (status.consumers if status is not None else [])
    ]
    document["slots"] = [msgspec.to_builtins(u) for u in status.slots] if status is not None else []
    return document


@dataclass(frozen=True, slots=True)
class MeasuredWindow:
    """The control plane's status at the start and end of the measured window."""

    warm: ControlPlaneStatus | None
    final: ControlPlaneStatus | None
    seconds: float
    cpu_s: float
    """CPU seconds of the control plane's process in the window (0.0 where unknown)."""
    loads: tuple[float, float]
    """1-minute load average at the window's start and end."""
    initial_placement_s: float | None
    """Submission -> every trajectory's first command received (None: not within the run)."""


async def _measure(plane: FakeDataPlane, data_dir: Path, started: float) -> MeasuredWindow:
    """Wait out the warm-up: ``warmup_s``, and until every trajectory has received its first
    command (the initial placement burst is not the steady state the figures describe; its
    length is reported), but never past ``duration_s``. Then measure for the rest of
    ``duration_s`` (at least ``duration_s - warmup_s``)."""
    options = plane.options
    while time.perf_counter() - started < options.duration_s:
        elapsed_s = time.perf_counter() - started
        if elapsed_s >= options.warmup_s and plane.all_started_at is not None:
            break
        await asyncio.sleep(0.1)
    warm, warm_at = read_status(data_dir), time.perf_counter()
    warm_cpu_s, warm_load = _cpu_s(warm), os.getloadavg()[0]
    plane.is_measuring = True
    await asyncio.sleep(options.duration_s - options.warmup_s)
    final, final_at = read_status(data_dir), time.perf_counter()
    initial_s = None if plane.all_started_at is None else plane.all_started_at - started
    return MeasuredWindow(
        warm=warm,
        final=final,
        seconds=final_at - warm_at,
        cpu_s=max(0.0, _cpu_s(final) - warm_cpu_s),
        loads=(warm_load, os.getloadavg()[0]),
        initial_placement_s=initial_s,
    )


def plane_figures(window: MeasuredWindow) -> dict[str, float]:
    """The control plane's own figures between the window's two status snapshots: events
    decided per second, p50/p99/max of the decision latency (an event's arrival at the control
    plane -> its outputs stored) and of the consumer age (an event stored in the stream -> the
    control plane deciding it), and its CPU per event. Snapshots are up to a status interval
    old."""
    warm, final, elapsed_s = window.warm, window.final, window.seconds
    if final is None or not final.consumers:
        return {}
    later = final.consumers[0]
    earlier = warm.consumers[0] if warm is not None and warm.consumers else None
    decisions = minus(later.decisions, earlier.decisions if earlier else None)
    ages = minus(later.ages, earlier.ages if earlier else None)
    num_decided = later.num_decided - (earlier.num_decided if earlier else 0)
    cpu_us = window.cpu_s / num_decided * 1e6 if num_decided > 0 and window.cpu_s > 0 else 0.0
    return {
        "cpu_us_per_event": cpu_us,
        "events_per_s": num_decided / elapsed_s if elapsed_s > 0 else 0.0,
        "num_decisions": decisions.num_samples,
        "decision_ms_p50": quantile_ms(decisions, 0.5),
        "decision_ms_p99": quantile_ms(decisions, 0.99),
        "decision_ms_max": quantile_ms(decisions, 1.0),
        "num_ages": ages.num_samples,
        "age_ms_p50": quantile_ms(ages, 0.5),
        "age_ms_p99": quantile_ms(ages, 0.99),
        "age_ms_max": quantile_ms(ages, 1.0),
    }


def _cpu_s(status: ControlPlaneStatus | None) -> float:
    """CPU seconds the control plane's process has used (Linux ``/proc``; 0.0 elsewhere)."""
    if status is None:
        return 0.0
    try:
        fields = Path(f"/proc/{status.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
