"""The slowest trajectory of a rollout, part by part, and how far a live run fell behind its time
scale: both from the completed trajectories (``Completed.timings``, model seconds) and the
time splits ``heddle.rollout.breakdown`` gives their event timestamps.
"""

from __future__ import annotations

import msgspec

from heddle.events import Completed, RolloutSubmitted, TrajectoryTimings
from heddle.rollout.breakdown import TimeSplit

LAG_WARNING_FRACTION = 0.05
"""Above this share of the trajectories' time spent behind the scaled clock, the summary warns."""


class SlowestTrajectory(msgspec.Struct, frozen=True, kw_only=True):
    traj_id: str
    num_steps: int
    num_output_tokens: int
    queue_s: float
    prefill_s: float
    decode_s: float
    tool_s: float
    migration_s: float
    admission_s: float = 0.0
    """Submitted, not yet started: the control plane held it (KV admission, a concurrency cap)
    until the event its start was decided on."""
    held_s: float = 0.0
    """Between steps, ready: the control plane held it until the event its continue was
    decided on (a paused program)."""
    weights_s: float = 0.0
    """Its generations waited on their worker for weight swaps."""
    reshard_s: float = 0.0
    """Steps a re-shard interrupted: their stop, hand-over and relaunch."""
    control_s: float = 0.0
    """The control plane's reactions: an event stored -> the command it caused stored."""
    messaging_s: float = 0.0
    """Events' trips into the stream and commands' trips to the worker."""
    tool_queue_s: float = 0.0
    """Tool calls' trips to an executor and their wait for one."""
    engine_lag_s: float = 0.0
    """Engine results later than the scaled clock (``GenerationStarted`` -> ``Generated`` beyond
    the engine's queue, prefill and decode)."""
    worker_lag_s: float = 0.0
    """The worker's own handling between commands, results, tool calls and the end."""
    other_s: float
    """The rest of ``total_s``: time no part above explains (clock rounding, steps re-run after
    a failure, KV transfers overlapping a tool call); never negative (parts that overlap by
    clock rounding leave none). At a high time scale each wall millisecond of any part but the
    modelled ones costs ``time_scale`` model milliseconds."""
    total_s: float
    """Model seconds from its submission to its end (from its first step's arrival on a worker
    when the submission was not seen): the sum of every part above."""
    end_s: float
    """Model seconds from the rollout's submission to its end (the makespan, for the slowest)."""
    workers: list[str]


class LagReport(msgspec.Struct, frozen=True, kw_only=True):
    """How far a live run fell behind its time scale, as shares of the completed trajectories'
    time (sum of each part over the sum of their totals): what the workers and the control
    plane add to the simulated time, each wall second counted ``time_scale`` times."""

    worker_lag_fraction: float = 0.0
    """The workers' lag: engine results later than the scaled clock and the workers' own
    handling."""
    control_lag_fraction: float = 0.0
    """The control plane's reactions (event stored -> command stored)."""
    messaging_fraction: float = 0.0
    tool_queue_fraction: float = 0.0
    slowest_behind_fraction: float = 0.0
    """The slowest trajectory's time outside its modelled parts over its total: the share of
    the makespan the run did not keep its time scale."""
    warning: str = ""
    """Non-empty when a share above exceeds ``LAG_WARNING_FRACTION``."""


def slowest_trajectory(
    completed: dict[str, Completed], splits: dict[str, TimeSplit], start: float, scale: float
) -> SlowestTrajectory | None:
    """The trajectory that ended last (ties: the larger id), its time part by part; ``start``:
    the rollout's submission (wall), ``scale``: its time scale. None before any completion."""
    if not completed:
        return None
    last = max(completed.values(), key=lambda c: (c.occurred_at, c.traj_id))
    timings: TrajectoryTimings = last.timings
    split = splits[last.traj_id]
    total_s = split.span_s if split.span_s > 0 else timings.total_s
    return SlowestTrajectory(
        traj_id=last.traj_id,
        num_steps=last.num_steps,
        num_output_tokens=last.num_output_tokens,
        queue_s=timings.queue_s,
        prefill_s=timings.prefill_s,
        decode_s=timings.decode_s,
        tool_s=timings.tool_s,
        migration_s=timings.migration_s,
        admission_s=split.admission_s,
        held_s=split.held_s,
        weights_s=split.weights_s,
        reshard_s=split.reshard_s,
        control_s=split.control_s,
        messaging_s=split.messaging_s,
        tool_queue_s=split.tool_queue_s,
        engine_lag_s=split.engine_lag_s,
        worker_lag_s=split.worker_lag_s,
        other_s=max(0.0, total_s - _parts_s(timings) - split.holds_s - split.overhead_s),
        total_s=total_s,
        end_s=max(0.0, last.occurred_at - start) * scale,
        workers=list(last.worker_history),
    )


def _parts_s(timings: TrajectoryTimings) -> float:
    return (
        timings.queue_s + timings.prefill_s + timings.decode_s + timings.tool_s
        + timings.migration_s
    )  # fmt: skip


def lag_report(
    completed: dict[str, Completed],
    splits: dict[str, TimeSplit],
    slowest: SlowestTrajectory | None,
    submitted: RolloutSubmitted | None,
) -> LagReport:
    """The shares of the completed trajectories' time spent behind the scaled clock, with the
    warning ``lag_warning`` gives."""
    total_s = sum(
        splits[t].span_s if splits[t].span_s > 0 else c.timings.total_s
        for t, c in completed.items()
    )
    if total_s <= 0 or slowest is None:
        return LagReport()

    def share(part_s: float) -> float:
        return part_s / total_s

    behind_s = max(0.0, slowest.total_s - _slowest_modelled_s(slowest))
    report = LagReport(
        worker_lag_fraction=share(sum(s.lag_s for s in splits.values())),
        control_lag_fraction=share(sum(s.control_s for s in splits.values())),
        messaging_fraction=share(sum(s.messaging_s for s in splits.values())),
        tool_queue_fraction=share(sum(s.tool_queue_s for s in splits.values())),
        slowest_behind_fraction=behind_s / slowest.total_s if slowest.total_s > 0 else 0.0,
    )
    return msgspec.structs.replace(report, warning=lag_warning(report, submitted))


def _slowest_modelled_s(slowest: SlowestTrajectory) -> float:
    """Its time on the model: the modelled parts and the holds the simulator has too."""
    return (
        slowest.queue_s + slowest.prefill_s + slowest.decode_s + slowest.tool_s
        + slowest.migration_s + slowest.admission_s + slowest.held_s + slowest.weights_s
    )  # fmt: skip


def lag_warning(report: LagReport, submitted: RolloutSubmitted | None) -> str:
    """A line naming the shares above ``LAG_WARNING_FRACTION`` ("" when none is)."""
    shares = {
        "workers' lag": report.worker_lag_fraction,
        "control plane": report.control_lag_fraction,
        "messaging": report.messaging_fraction,
        "tool queueing": report.tool_queue_fraction,
        "slowest trajectory off the model": report.slowest_behind_fraction,
    }
    over = {name: value for name, value in shares.items() if value > LAG_WARNING_FRACTION}
    if not over:
        return ""
    scale = submitted.time_scale if submitted is not None else 1.0
    listed = ", ".join(f"{name} {value:.0%}" for name, value in over.items())
    return (
        f"the run fell behind its time scale ({scale:g}x): {listed} of the trajectories' time "
        f"(over {LAG_WARNING_FRACTION:.0%}); the makespan is not the policy's alone: lower "
        "--time-scale or spread the processes over more cores"
    )
