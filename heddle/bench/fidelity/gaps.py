"""Where a live rollout spends wall time the cost model does not know about.

From a recorded rollout's events (stream order), per step of every trajectory (wall seconds;
model-time durations divided by the time scale):

- ``tool_dispatch``: ``ToolCalled`` -> ``ToolReturned`` minus the tool's own duration (the tool
  call's trip through the tools stream, the executor's pick-up and the result's way back);
- ``routing``: ``ToolReturned`` -> the next ``GenerationStarted`` (the control plane decides and
  routes the next step, the worker's command consumer takes it);
- ``engine_lateness``: ``GenerationStarted`` -> ``Generated`` minus the queue, prefill and decode
  time the engine reported (timer lateness of the sim engine's driver, event-loop delays).

The simulator has none of these, so their sum along the slowest trajectory, times the time
scale, is roughly how much longer the live makespan is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from heddle.events import (
    Event,
    Generated,
    GenerationStarted,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
)

GAP_KINDS = ("tool_dispatch", "routing", "engine_lateness")


@dataclass(slots=True)
class _Step:
    started_at: float | None = None
    generated_at: float | None = None
    engine_s: float = 0.0
    called_at: float | None = None
    returned_at: float | None = None
    tool_s: float = 0.0


@dataclass(frozen=True, slots=True)
class GapStats:
    """Per kind: median and p90 per step (wall milliseconds), and the trajectory total that
    is largest (model seconds: wall x time scale)."""

    time_scale: float
    median_ms: dict[str, float]
    p90_ms: dict[str, float]
    max_trajectory_total_model_s: dict[str, float]
    num_steps: int

    def to_json(self) -> dict[str, object]:
        return {
            "time_scale": self.time_scale,
            "per_step_median_wall_ms": self.median_ms,
            "per_step_p90_wall_ms": self.p90_ms,
            "largest_trajectory_total_model_s": self.max_trajectory_total_model_s,
            "num_steps": self.num_steps,
        }


@dataclass(slots=True)
class _Fold:
    time_scale: float = 1.0
    steps: dict[tuple[str, int], _Step] = field(default_factory=dict)

    def step(self, traj_id: str, step: int) -> _Step:
        key = (traj_id, step)
        found = self.steps.get(key)
        if found is None:
            found = self.steps[key] = _Step()
        return found

    def add(self, event: Event) -> None:
        match event:
            case RolloutSubmitted():
                self.time_scale = event.time_scale
            case GenerationStarted():
                step = self.step(event.traj_id, event.step)
                step.started_at = step.started_at or event.occurred_at
            case Generated():
                step = self.step(event.traj_id, event.step)
                step.generated_at = event.occurred_at
                step.engine_s = event.queue_s + event.prefill_s + event.decode_s
            case ToolCalled():
                self.step(event.traj_id, event.step).called_at = event.occurred_at
            case ToolReturned():
                step = self.step(event.traj_id, event.step)
                step.returned_at, step.tool_s = event.occurred_at, event.duration_s


def step_gaps(events: Iterable[Event]) -> GapStats:
    """The gaps of every step found complete in ``events`` (see the module docstring)."""
    fold = _Fold()
    for event in events:
        fold.add(event)
    scale = fold.time_scale
    per_kind: dict[str, list[float]] = {kind: [] for kind in GAP_KINDS}
    per_trajectory: dict[str, dict[str, float]] = {kind: {} for kind in GAP_KINDS}
    for (traj_id, index), step in fold.steps.items():
        following = fold.steps.get((traj_id, index + 1))
        gaps = {
            "tool_dispatch": _gap(step.called_at, step.returned_at, step.tool_s / scale),
            "routing": _gap(step.returned_at, following.started_at if following else None, 0.0),
            "engine_lateness": _gap(step.started_at, step.generated_at, step.engine_s / scale),
        }
        for kind, gap in gaps.items():
            if gap is not None:
                per_kind[kind].append(gap)
                totals = per_trajectory[kind]
                totals[traj_id] = totals.get(traj_id, 0.0) + gap
    return GapStats(
        time_scale=scale,
        median_ms={k: _quantile_ms(v, 50) for k, v in per_kind.items()},
        p90_ms={k: _quantile_ms(v, 90) for k, v in per_kind.items()},
        max_trajectory_total_model_s={
            k: max(v.values(), default=0.0) * scale for k, v in per_trajectory.items()
        },
        num_steps=len(fold.steps),
    )


def _gap(start: float | None, end: float | None, expected_s: float) -> float | None:
    if start is None or end is None:
        return None
    return end - start - expected_s


def _quantile_ms(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000.0 if values else 0.0
