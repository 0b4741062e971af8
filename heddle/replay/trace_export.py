"""Recorded rollouts as JSONL traces (docs/design.md "Simulator and trace format").

Per trajectory: ``prompt_tokens`` from its submission, and per generated step ``output_tokens``,
``tool_s`` (the tool call that followed it) and ``tool_output_tokens``: the tokens the next
generation appended to the context (its ``input_token_ids``), or, after the last generation,
the tool's own output tokens.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from heddle.ledger import Ledger, queries
from heddle.ledger.rows import StepRow, TrajectoryRow
from heddle.traces import TraceStep, TraceTrajectory, write_trace


def trace_of(ledger: Ledger, rollout_id: str | None = None) -> list[TraceTrajectory]:
    """Trajectories with at least one generated step, in rollout then submission order. Ids
    are trajectory ids, prefixed with the rollout id when several rollouts are exported."""
    rollout_ids = [rollout_id] if rollout_id else sorted(queries.rollout_ids(ledger, limit=10**6))
    prefix = len(rollout_ids) > 1
    exported: list[TraceTrajectory] = []
    for rollout in rollout_ids:
        steps_by_trajectory: dict[str, list[StepRow]] = defaultdict(list)
        for step in queries.steps(ledger, rollout):
            if step.generated_at is not None:
                steps_by_trajectory[step.traj_id].append(step)
        for trajectory in queries.trajectories(ledger, rollout):
            steps = steps_by_trajectory.get(trajectory.traj_id)
            if steps:
                exported.append(_trace_trajectory(trajectory, steps, prefix))
    return exported


def export_trace(ledger: Ledger, path: Path, rollout_id: str | None = None) -> int:
    """Write ``trace_of(ledger, rollout_id)`` to ``path``; returns the number of trajectories."""
    return write_trace(path, trace_of(ledger, rollout_id))


def _trace_trajectory(
    trajectory: TrajectoryRow, steps: list[StepRow], prefix: bool
) -> TraceTrajectory:
    trace_steps = []
    for index, step in enumerate(steps):
        following = steps[index + 1] if index + 1 < len(steps) else None
        tool_output_tokens = (
            following.num_input_tokens if following is not None else step.num_tool_output_tokens
        )
        trace_steps.append(
            TraceStep(
                output_tokens=step.num_output_tokens,
                tool_s=step.tool_s,
                tool_output_tokens=tool_output_tokens,
            )
        )
    traj_id = f"{trajectory.rollout_id}:{trajectory.traj_id}" if prefix else trajectory.traj_id
    return TraceTrajectory(
        id=traj_id,
        group=trajectory.group_id,
        prompt_tokens=trajectory.num_prompt_tokens,
        steps=trace_steps,
    )
