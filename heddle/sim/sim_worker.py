"""A simulated rollout worker (a batching model and its armed wake-up) and the generation job
a trajectory's step submits to it."""

from __future__ import annotations

from dataclasses import dataclass

from heddle.policy.batching import BatchingModel, GenerationJob
from heddle.sim.trajectories import SimTrajectory


@dataclass(slots=True)
class SimWorker:
    worker_id: str
    tp_degree: int
    model: BatchingModel
    wake_at: float | None = None


def generation_job(
    t: SimTrajectory, request_id: str, num_new_tokens: int, num_output_tokens: int
) -> GenerationJob:
    """A generation of ``t``'s whole context so far (its group's prompt shared in the cache)."""
    return GenerationJob(
        request_id=request_id,
        traj_id=t.traj_id,
        num_context_tokens=t.context_tokens,
        num_new_tokens=num_new_tokens,
        num_output_tokens=num_output_tokens,
        priority=t.priority,
        group_id=t.trace.group,
        num_prompt_tokens=t.trace.prompt_tokens if t.trace.group else 0,
    )
