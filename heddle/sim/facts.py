"""The events the simulated data plane publishes, built like a live worker would build them.

Ids follow ``heddle.ids.derive_id`` (the parts joined by ':'); the per-step ones are spelled
out as f-strings, which the simulator builds millions of times. Token lists are pseudo-tokens
(zeros) of the right length: the deciders read their lengths, and
a fresh list per event keeps memory flat (nothing retains them unless events are recorded).
``Completed`` carries counts and timings but no token lists. Each event names the hosting it
was written under (``SimTrajectory.epoch``). A step's ``GenerationStarted`` is built only for
recorded runs (no decider reads one).
"""

from __future__ import annotations

from heddle.events import (
    Completed,
    Failed,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    Migrated,
    ToolCalled,
    ToolReturned,
    WorkerRegistered,
    WorkerRetired,
)
from heddle.ids import derive_id
from heddle.policy.batching import FinishedGeneration
from heddle.sim.sim_worker import SimWorker
from heddle.sim.trajectories import SimTrajectory

TOOL_NAME = "trace"


def generation_started(rollout_id: str, t: SimTrajectory, now: float) -> GenerationStarted:
    return GenerationStarted(
        event_id=f"{rollout_id}:{t.traj_id}:{t.step}:generation_started",
        rollout_id=rollout_id,
        occurred_at=now,
        traj_id=t.traj_id,
        step=t.step,
        worker_id=t.worker_id,
        epoch=t.epoch,
        input_token_ids=[0] * t.new_tokens,
        num_context_tokens=t.context_tokens,
        priority=t.priority,
    )


def generated(
    rollout_id: str, t: SimTrajectory, done: FinishedGeneration, weights_wait_s: float = 0.0
) -> Generated:
    """The step's whole output: what an interrupted generation of it produced, then ``done``'s."""
    return Generated(
        event_id=f"{rollout_id}:{t.traj_id}:{t.step}:generated",
        rollout_id=rollout_id,
        occurred_at=done.finished_at,
        traj_id=t.traj_id,
        step=t.step,
        worker_id=t.worker_id,
        epoch=t.epoch,
        output_token_ids=[0] * (t.interrupted_tokens + done.num_output_tokens),
        finish_reason="stop" if t.is_last_step else "tool_call",
        num_context_tokens=done.num_context_tokens,
        queue_s=done.queue_s,
        prefill_s=done.prefill_s,
        decode_s=done.decode_s,
        num_preemptions=done.num_preemptions,
        num_recomputed_tokens=done.num_recomputed_tokens,
        weight_version=t.weight_versions[-1] if t.weight_versions else 0,
        weights_wait_s=weights_wait_s,
    )


def tool_called(rollout_id: str, t: SimTrajectory, now: float) -> ToolCalled:
    return ToolCalled(
        event_id=f"{rollout_id}:{t.traj_id}:{t.step}:tool_called",
        rollout_id=rollout_id,
        occurred_at=now,
        traj_id=t.traj_id,
        step=t.step,
        worker_id=t.worker_id,
        epoch=t.epoch,
        call_id=f"{rollout_id}:{t.traj_id}:{t.step}:call",
        tool=TOOL_NAME,
        pool=t.spec.tool_pool,
    )


def tool_returned(
    rollout_id: str, t: SimTrajectory, step: int, duration_s: float, now: float
) -> ToolReturned:
    return ToolReturned(
        event_id=f"{rollout_id}:{t.traj_id}:{step}:tool_returned",
        rollout_id=rollout_id,
        occurred_at=now,
        traj_id=t.traj_id,
        step=step,
        call_id=f"{rollout_id}:{t.traj_id}:{step}:call",
        tool=TOOL_NAME,
        status="ok",
        output_token_ids=[0] * t.trace.steps[step].tool_output_tokens,
        duration_s=duration_s,
        executor_id="sim",
    )


def completed(rollout_id: str, t: SimTrajectory) -> Completed:
    return Completed(
        event_id=derive_id(rollout_id, t.traj_id, "completed"),
        rollout_id=rollout_id,
        occurred_at=t.finished_at,
        traj_id=t.traj_id,
        num_steps=len(t.trace.steps),
        num_output_tokens=t.num_output_tokens,
        timings=t.timings(),
        worker_history=list(t.worker_history),
        num_recomputed_tokens=t.num_recomputed_tokens,
        weight_versions=list(t.weight_versions),
        worker_id=t.worker_id,
        epoch=t.epoch,
    )


def failed(rollout_id: str, t: SimTrajectory, reason: str, now: float) -> Failed:
    return Failed(
        event_id=derive_id(rollout_id, t.traj_id, t.step, "failed"),
        rollout_id=rollout_id,
        occurred_at=now,
        traj_id=t.traj_id,
        step=t.step,
        reason=reason,
        worker_id=t.worker_id,
        epoch=t.epoch,
    )


def migrated(
    rollout_id: str, t: SimTrajectory, source: str, num_bytes: int, now: float
) -> Migrated:
    return Migrated(
        event_id=derive_id(rollout_id, t.traj_id, t.step, source, t.migration_target, "migrated"),
        rollout_id=rollout_id,
        occurred_at=now,
        traj_id=t.traj_id,
        source_worker_id=source,
        target_worker_id=t.migration_target,
        num_context_tokens=t.context_tokens,
        num_bytes=num_bytes,
        kv_transferred=num_bytes > 0,
        transfer_s=now - t.migration_started_at,
        epoch=t.epoch,
        target_epoch=t.migration_target_epoch,
    )


def generation_interrupted(
    rollout_id: str, t: SimTrajectory, part: FinishedGeneration, reason: str
) -> GenerationInterrupted:
    return GenerationInterrupted(
        event_id=derive_id(rollout_id, t.traj_id, t.step, part.request_id, "interrupted"),
        rollout_id=rollout_id,
        occurred_at=part.finished_at,
        traj_id=t.traj_id,
        step=t.step,
        worker_id=t.worker_id,
        epoch=t.epoch,
        output_token_ids=[0] * part.num_output_tokens,
        reason=reason,
        queue_s=part.queue_s,
        prefill_s=part.prefill_s,
        decode_s=part.decode_s,
    )


def worker_registered(
    worker: SimWorker, model: str, max_running: int, now: float
) -> WorkerRegistered:
    """A simulated worker's registration (again after a re-shard, with its new degree)."""
    return WorkerRegistered(
        event_id=derive_id(worker.worker_id, "registered", worker.incarnation or None),
        occurred_at=now,
        worker_id=worker.worker_id,
        engine="sim",
        model=model,
        tp_degree=worker.tp_degree,
        max_running=max_running,
        max_kv_tokens=worker.model.max_kv_tokens,
        can_export_kv=True,
        incarnation=str(worker.incarnation) if worker.incarnation else "",
        node=worker.node,
        gpu_ids=list(worker.gpu_ids),
    )


def worker_retired(
    worker: SimWorker, reshard_id: str, successor_id: str, hosted: list[str], now: float
) -> WorkerRetired:
    return WorkerRetired(
        event_id=derive_id(worker.worker_id, reshard_id, "retired"),
        occurred_at=now,
        worker_id=worker.worker_id,
        reshard_id=reshard_id,
        successor_worker_id=successor_id,
        trajectory_ids=hosted,
        gpu_ids=list(worker.gpu_ids),
    )
