"""Earlier rollouts' completed trajectories from the ledger, for predictors that learn.

The stream replay at start already teaches the predictor every completion it holds; the ledger
adds rollouts the replay did not cover (their events are older than the stream keeps, or were
recorded by another deployment into the same database).
"""

from __future__ import annotations

from collections.abc import Collection

from heddle.controlplane.live_predictor import trace_from_steps
from heddle.ledger import Ledger, queries
from heddle.ledger.statuses import TrajectoryStatus
from heddle.traces import TraceTrajectory


def ledger_history(
    ledger: Ledger, *, exclude_rollouts: Collection[str] = (), max_rollouts: int = 20
) -> list[TraceTrajectory]:
    """Completed trajectories of the ``max_rollouts`` most recent rollouts not excluded, as
    trace lines (per step: output tokens, tool seconds, observation tokens)."""
    history: list[TraceTrajectory] = []
    for rollout_id in queries.rollout_ids(ledger, limit=max_rollouts + len(exclude_rollouts)):
        if rollout_id in exclude_rollouts:
            continue
        steps_by_traj: dict[str, list[tuple[int, float, int]]] = {}
        for step in queries.steps(ledger, rollout_id):
            steps_by_traj.setdefault(step.traj_id, []).append(
                (step.num_output_tokens, step.tool_s, step.num_tool_output_tokens)
            )
        for row in queries.trajectories(ledger, rollout_id):
            if row.status is not TrajectoryStatus.COMPLETED:
                continue
            trace = trace_from_steps(
                f"{rollout_id}/{row.traj_id}",
                row.group_id,
                row.num_prompt_tokens,
                steps_by_traj.get(row.traj_id, []),
            )
            if trace is not None:
                history.append(trace)
        max_rollouts -= 1
        if max_rollouts <= 0:
            break
    return history
