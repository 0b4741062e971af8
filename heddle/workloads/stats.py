"""Summary statistics of a trace: what the workload tests check and the figures' README prints."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from heddle.traces import TraceTrajectory


@dataclass(frozen=True, slots=True)
class WorkloadSummary:
    num_trajectories: int
    num_groups: int
    mean_turns: float
    median_turns: float
    max_turns: int
    median_prompt_tokens: float
    median_output_tokens: float
    """Median over trajectories of the total generated tokens."""
    p90_output_tokens: float
    p99_output_tokens: float
    max_output_tokens: int
    median_turn_output_tokens: float
    """Median over all turns of one generation's length."""
    median_tool_output_tokens: float
    median_tool_call_s: float
    p90_tool_call_s: float
    max_tool_call_s: float
    group_explained_variance: float
    """Share of the variance of total output tokens explained by the group (prompt) alone: the
    R^2 of predicting each trajectory by its group's mean. Low means the prompt predicts length
    poorly (docs/calibration.md s.2)."""

    @property
    def tail_ratio(self) -> float:
        """Max over median of total output tokens (the paper: > 4x)."""
        return self.max_output_tokens / self.median_output_tokens


def summarize(trajectories: Sequence[TraceTrajectory]) -> WorkloadSummary:
    if not trajectories:
        raise ValueError("cannot summarize an empty trace")
    turns = np.array([len(t.steps) for t in trajectories])
    outputs = np.array([t.num_output_tokens for t in trajectories], dtype=np.float64)
    turn_outputs = [s.output_tokens for t in trajectories for s in t.steps]
    tool_steps = [s for t in trajectories for s in t.steps[:-1]]
    tool_times = np.array([s.tool_s for s in tool_steps]) if tool_steps else np.zeros(1)
    tool_outputs = [s.tool_output_tokens for s in tool_steps] or [0]
    return WorkloadSummary(
        num_trajectories=len(trajectories),
        num_groups=len({t.group for t in trajectories}),
        mean_turns=float(turns.mean()),
        median_turns=float(np.median(turns)),
        max_turns=int(turns.max()),
        median_prompt_tokens=float(np.median([t.prompt_tokens for t in trajectories])),
        median_output_tokens=float(np.median(outputs)),
        p90_output_tokens=float(np.percentile(outputs, 90)),
        p99_output_tokens=float(np.percentile(outputs, 99)),
        max_output_tokens=int(outputs.max()),
        median_turn_output_tokens=float(np.median(turn_outputs)),
        median_tool_output_tokens=float(np.median(tool_outputs)),
        median_tool_call_s=float(np.median(tool_times)),
        p90_tool_call_s=float(np.percentile(tool_times, 90)),
        max_tool_call_s=float(tool_times.max()),
        group_explained_variance=group_explained_variance(trajectories),
    )


def group_explained_variance(trajectories: Sequence[TraceTrajectory]) -> float:
    """Between-group over total variance of total output tokens (eta squared, in [0, 1])."""
    by_group: dict[str, list[float]] = defaultdict(list)
    for trajectory in trajectories:
        by_group[trajectory.group].append(float(trajectory.num_output_tokens))
    values = np.concatenate([np.array(v) for v in by_group.values()])
    grand_mean = float(values.mean())
    total = float(((values - grand_mean) ** 2).sum())
    if total == 0:
        return 0.0
    between = sum(len(v) * (float(np.mean(v)) - grand_mean) ** 2 for v in by_group.values())
    return between / total
