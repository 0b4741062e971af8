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
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec

from heddle.bench.control_player import BenchOptions, FakeDataPlane
from heddle.bus import Bus, BusOptions
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, ControlPlaneStatus, read_status
from heddle.controlplane.latency import minus, quantile_ms
from heddle.rollout.deployment import LocalDeployment, delete_control_durables
from heddle.rollout.submission import RolloutPlan, new_rollout_id, trace_specs
from heddle.rollout.submit import cancel, submit
from heddle.traces import TraceTrajectory


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
            await cancel(bus, rollout_id, "benchmark over")
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
