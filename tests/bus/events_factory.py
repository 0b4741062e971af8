"""Small event builders for the bus and ledger tests."""

from __future__ import annotations

from heddle.events import Generated, GenerationStarted
from heddle.ids import derive_id, trajectory_id


def generated(rollout_id: str, traj_index: int, step: int, num_tokens: int = 8) -> Generated:
    traj = trajectory_id(traj_index)
    return Generated(
        event_id=derive_id(rollout_id, traj, step, "generated"),
        rollout_id=rollout_id,
        traj_id=traj,
        occurred_at=1_700_000_000.0 + step,
        step=step,
        worker_id="w00",
        output_token_ids=list(range(num_tokens)),
        output_logprobs=[-0.5] * num_tokens,
        num_context_tokens=100 + step * num_tokens,
        decode_s=0.25,
    )


def generation_started(rollout_id: str, traj_index: int, step: int) -> GenerationStarted:
    traj = trajectory_id(traj_index)
    return GenerationStarted(
        event_id=derive_id(rollout_id, traj, step, "generation_started"),
        rollout_id=rollout_id,
        traj_id=traj,
        occurred_at=1_700_000_000.0 + step,
        step=step,
        worker_id="w00",
        input_token_ids=[1, 2, 3],
        num_context_tokens=100,
    )


def steps(rollout_id: str, num_trajectories: int, num_steps: int) -> list[Generated]:
    """``num_steps`` generated events for each trajectory, interleaved step by step."""
    return [
        generated(rollout_id, traj, step)
        for step in range(num_steps)
        for traj in range(num_trajectories)
    ]
