"""The event builders of the tests: one factory for every test that needs stream facts.

Two families:

- decider facts of one rollout ``ROLLOUT`` (``worker``, ``rollout``, ``submitted``, ``predicted``,
  ``generated``, ``tool_called``, ``tool_returned``, ``completed``, ``migrated``,
  ``worker_failed``): small values, ids readable in a failing assertion;
- stream facts of any rollout, numbered like the product's ids (``generated_of``,
  ``generation_started_of``, ``steps``): derived ids and realistic token arrays, for the bus,
  replay and ledger tests;

and the command a router sends once a tool returned (``continue_after``), for the worker tests.
"""

from __future__ import annotations

from heddle.events import (
    Completed,
    ContinueTrajectory,
    Generated,
    GenerationStarted,
    Migrated,
    Predicted,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectorySpec,
    TrajectorySubmitted,
    WorkerFailed,
    WorkerRegistered,
)
from heddle.ids import derive_id, trajectory_id

ROLLOUT = "r1"


def worker(worker_id: str, tp: int = 1, at: float = 0.0) -> WorkerRegistered:
    return WorkerRegistered(
        event_id=f"{worker_id}:registered",
        occurred_at=at,
        worker_id=worker_id,
        engine="sim",
        tp_degree=tp,
    )


def rollout(num: int, at: float = 0.0) -> RolloutSubmitted:
    return RolloutSubmitted(
        event_id=f"{ROLLOUT}:submitted",
        rollout_id=ROLLOUT,
        occurred_at=at,
        policy="test",
        num_trajectories=num,
    )


def submitted(
    traj_id: str, index: int, prompt: int = 100, group: str = "g0", at: float = 0.0
) -> TrajectorySubmitted:
    spec = TrajectorySpec(
        group_id=group, index=index, environment="trace", prompt_token_ids=[0] * prompt
    )
    return TrajectorySubmitted(
        event_id=f"{ROLLOUT}:{traj_id}:submitted",
        rollout_id=ROLLOUT,
        occurred_at=at,
        traj_id=traj_id,
        spec=spec,
    )


def predicted(traj_id: str, step: int, remaining: float, at: float = 0.0) -> Predicted:
    return Predicted(
        event_id=f"{ROLLOUT}:{traj_id}:{step}:predicted",
        rollout_id=ROLLOUT,
        occurred_at=at,
        traj_id=traj_id,
        step=step,
        predicted_remaining_tokens=remaining,
        predictor="test",
    )


def generated(
    traj_id: str, step: int, tokens: int, worker_id: str = "w0", at: float = 1.0
) -> Generated:
    return Generated(
        event_id=f"{ROLLOUT}:{traj_id}:{step}:generated",
        rollout_id=ROLLOUT,
        occurred_at=at,
        traj_id=traj_id,
        step=step,
        worker_id=worker_id,
        output_token_ids=[0] * tokens,
        prefill_s=0.5,
        decode_s=2.0,
    )


def tool_called(traj_id: str, step: int, worker_id: str = "w0", at: float = 1.0) -> ToolCalled:
    return ToolCalled(
        event_id=f"{ROLLOUT}:{traj_id}:{step}:tool_called",
        rollout_id=ROLLOUT,
        occurred_at=at,
        traj_id=traj_id,
        step=step,
        worker_id=worker_id,
        call_id=f"{traj_id}:{step}",
        tool="trace",
    )


def tool_returned(traj_id: str, step: int, tokens: int = 10, at: float = 2.0) -> ToolReturned:
    return ToolReturned(
        event_id=f"{ROLLOUT}:{traj_id}:{step}:tool_returned",
        rollout_id=ROLLOUT,
        occurred_at=at,
        traj_id=traj_id,
        step=step,
        call_id=f"{traj_id}:{step}",
        tool="trace",
        status="ok",
        output_token_ids=[0] * tokens,
        duration_s=1.0,
    )


def completed(traj_id: str, num_steps: int, tokens: int, at: float = 9.0) -> Completed:
    return Completed(
        event_id=f"{ROLLOUT}:{traj_id}:completed",
        rollout_id=ROLLOUT,
        occurred_at=at,
        traj_id=traj_id,
        num_steps=num_steps,
        num_output_tokens=tokens,
    )


def migrated(traj_id: str, source: str, target: str, at: float = 3.0) -> Migrated:
    return Migrated(
        event_id=f"{ROLLOUT}:{traj_id}:{source}:{target}:migrated",
        rollout_id=ROLLOUT,
        occurred_at=at,
        traj_id=traj_id,
        source_worker_id=source,
        target_worker_id=target,
    )


def worker_failed(worker_id: str, at: float = 5.0) -> WorkerFailed:
    return WorkerFailed(
        event_id=f"{worker_id}:failed", occurred_at=at, worker_id=worker_id, reason="test"
    )


# ---- stream facts of any rollout, with the product's derived ids ---------------------------


def generated_of(rollout_id: str, traj_index: int, step: int, num_tokens: int = 8) -> Generated:
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


def generation_started_of(rollout_id: str, traj_index: int, step: int) -> GenerationStarted:
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
        generated_of(rollout_id, traj, step)
        for step in range(num_steps)
        for traj in range(num_trajectories)
    ]


def continue_after(result: ToolReturned, worker_id: str) -> ContinueTrajectory:
    """The command that runs the step after ``result`` on ``worker_id`` (its id derived from the
    result's, so a redelivered result gives the same command)."""
    return ContinueTrajectory(
        command_id=derive_id(result.event_id, "continue"),
        rollout_id=result.rollout_id,
        issued_at=0.0,
        worker_id=worker_id,
        traj_id=result.traj_id,
        step=result.step + 1,
        tool_result=result,
    )
