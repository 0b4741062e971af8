"""What the operator events turn into (``heddle.control.operations``): commands to the worker
holding the target, or the event that ends it; ids derived from the operator event, so a
re-decided event sends the same output.
"""

from __future__ import annotations

from heddle.events import (
    Abort,
    Drain,
    Failed,
    RolloutCancelled,
    RolloutCancelRequested,
    TrajectoryAbortRequested,
    Undrain,
    WorkerDrainRequested,
    WorkerUndrainRequested,
)
from heddle.ids import derive_id


def drain_command(event: WorkerDrainRequested) -> Drain:
    return Drain(
        command_id=derive_id(event.event_id, "drain"),
        issued_at=event.occurred_at, worker_id=event.worker_id,
    )  # fmt: skip


def undrain_command(event: WorkerUndrainRequested) -> Undrain:
    return Undrain(
        command_id=derive_id(event.event_id, "undrain"),
        issued_at=event.occurred_at, worker_id=event.worker_id,
    )  # fmt: skip


def rollout_cancelled(event: RolloutCancelRequested, reason: str) -> RolloutCancelled:
    return RolloutCancelled(
        event_id=derive_id(event.rollout_id, "cancelled"),
        rollout_id=event.rollout_id, occurred_at=event.occurred_at, reason=reason,
    )  # fmt: skip


def abort_command(event: TrajectoryAbortRequested, worker_id: str, reason: str) -> Abort:
    """``Abort`` to the worker holding the trajectory."""
    return Abort(
        command_id=derive_id(event.event_id, "abort"), rollout_id=event.rollout_id,
        issued_at=event.occurred_at, worker_id=worker_id, traj_id=event.traj_id, reason=reason,
    )  # fmt: skip


def unplaced_abort_failed(event: TrajectoryAbortRequested, reason: str) -> Failed:
    """A trajectory aborted before its placement ends at once, not retryable."""
    return Failed(
        event_id=derive_id(event.event_id, "failed"), rollout_id=event.rollout_id,
        occurred_at=event.occurred_at, traj_id=event.traj_id, step=0, reason=reason,
        finish_reason="aborted",
    )  # fmt: skip
