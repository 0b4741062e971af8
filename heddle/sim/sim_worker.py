"""A simulated rollout worker (a batching model and its armed wake-up, on GPUs of one node)
and the generation job a trajectory's step submits to it."""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.policy.batching import BatchingModel, GenerationJob
from heddle.sim.trajectories import SimTrajectory


@dataclass(slots=True)
class SimWorker:
    worker_id: str
    tp_degree: int
    model: BatchingModel
    wake_at: float | None = None
    node: str = ""
    gpu_ids: tuple[int, ...] = ()
    incarnation: int = 0
    """Engine launches after the first (a re-shard relaunches it)."""
    previous_models: list[BatchingModel] = field(default_factory=list)
    """The engines it ran before a re-shard (their counters still count)."""

    @property
    def models(self) -> list[BatchingModel]:
        """Every engine it ran, the current one last."""
        return [*self.previous_models, self.model]


def trajectory_generation_job(
    t: SimTrajectory, request_id: str, num_new_tokens: int, num_output_tokens: int
) -> GenerationJob:
    """A generation of ``t``'s whole context so far (its group's prompt shared in the cache);
    the context holds what an interrupted generation of the step produced already."""
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
