"""The projection's pure core: fold events, in stream order, into ledger rows.

``BatchRows`` holds the rows one batch touches (loaded beforehand by the writer, or created with
defaults); ``apply`` changes them for one event. No I/O: the same fold serves the live projector
and a replay into a fresh ledger, which is why the two must agree row for row.

Token lists may come as lists or as raw JSON (``heddle.ledger.lean_decoder``): only their lengths
count. Step counters of a trajectory add the step's *change* (new value minus what the step held),
so a step reported twice (a retried publish outside the duplicate window) is not counted twice.
"""

from __future__ import annotations

from typing import assert_never

from heddle.events import (
    Completed,
    DeadLettered,
    EventT,
    ExecutorRegistered,
    Failed,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    Migrated,
    MigrationRequested,
    Predicted,
    Preempted,
    Prioritized,
    ReshardRequested,
    RolloutCancelled,
    RolloutCancelRequested,
    RolloutFinished,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectoryAbortRequested,
    TrajectoryPlaced,
    TrajectoryReprioritizeRequested,
    TrajectorySubmitted,
    WeightsLoaded,
    WeightsLoadFailed,
    WeightsPublished,
    WorkerDrained,
    WorkerDrainRequested,
    WorkerFailed,
    WorkerHeartbeat,
    WorkerRegistered,
    WorkerRetired,
    WorkerUndrainRequested,
)
from heddle.events.arrays import num_items
from heddle.events.base import TrajectoryTimings
from heddle.ledger.batch_rows import BatchRows
from heddle.ledger.fold_operator import apply_operator
from heddle.ledger.fold_records import dead_letter_row, migration_row, placement_row, prediction_row
from heddle.ledger.fold_steps import apply_step
from heddle.ledger.fold_workers import apply_weights, apply_worker
from heddle.ledger.rows import (
    MigrationRow,
    RolloutRow,
    TrajectoryRow,
)
from heddle.ledger.statuses import MigrationStatus, RolloutStatus, TrajectoryStatus

_NO_TIMINGS = TrajectoryTimings()


def apply(rows: BatchRows, event: EventT) -> None:
    """Fold one event into ``rows``."""
    match event:
        case GenerationStarted() | Generated() | ToolCalled() | ToolReturned():  # most events
            trajectory = rows.trajectory(event.rollout_id, event.traj_id)
            apply_step(trajectory, rows.step(event.rollout_id, event.traj_id, event.step), event)
            trajectory.last_step = max(trajectory.last_step, event.step)
            trajectory.updated_at = event.occurred_at
        case RolloutFinished() | RolloutCancelled() if event.rollout_id not in rows.rollouts:
            pass  # the end of a rollout never submitted (a mistyped id): no phantom row
        case RolloutSubmitted() | RolloutFinished() | RolloutCancelled():
            _apply_rollout(rows.rollout(event.rollout_id), event)
        case (
            TrajectorySubmitted()
            | TrajectoryPlaced()
            | Predicted()
            | Prioritized()
            | Preempted()
            | MigrationRequested()
            | Migrated()
            | Completed()
            | Failed()
        ):
            trajectory = rows.trajectory(event.rollout_id, event.traj_id)
            _apply_trajectory(rows, trajectory, event)
            trajectory.updated_at = event.occurred_at
        case (
            WorkerRegistered()
            | WorkerHeartbeat()
            | WorkerDrained()
            | WorkerFailed()
            | WorkerRetired()
        ):
            apply_worker(rows.worker(event.worker_id), event)
        case GenerationInterrupted() | ReshardRequested():
            pass  # the stream keeps them; the step's Generated carries its whole output
        case WeightsLoaded():
            apply_weights(rows.worker(event.worker_id), event)
        case WeightsPublished() | WeightsLoadFailed():
            pass  # the stream keeps them; a worker's row records what it loaded
        case DeadLettered():
            rows.dead_letters.append(dead_letter_row(event))
        case ExecutorRegistered():
            pass  # not projected: `heddle status` reads registrations from the stream
        case (
            TrajectoryReprioritizeRequested()
            | TrajectoryAbortRequested()
            | RolloutCancelRequested()
            | WorkerDrainRequested()
            | WorkerUndrainRequested()
        ):
            apply_operator(rows, event)
        case _:
            assert_never(event)


def _apply_rollout(
    row: RolloutRow, event: RolloutSubmitted | RolloutFinished | RolloutCancelled
) -> None:
    match event:
        case RolloutSubmitted():
            row.policy = event.policy
            row.source = event.source
            row.num_trajectories = event.num_trajectories
            row.time_scale = event.time_scale
            row.labels = dict(event.labels)
            row.submitted_at = event.occurred_at
            row.trainer = event.trainer
        case RolloutFinished():
            # A rollout cancelled first stays cancelled (control planes before operator
            # events finished a cancelled rollout once its aborted trajectories failed).
            row.status = (
                RolloutStatus.CANCELLED
                if row.status is RolloutStatus.CANCELLED
                else RolloutStatus.FINISHED
            )
            row.finished_at = event.occurred_at
            row.num_completed = event.num_completed
            row.num_failed = event.num_failed
            row.makespan_s = event.makespan_s
            row.num_output_tokens = event.num_output_tokens
        case RolloutCancelled():
            row.status = RolloutStatus.CANCELLED
            row.finished_at = event.occurred_at
            row.cancel_reason = event.reason


def _apply_trajectory(
    rows: BatchRows,
    row: TrajectoryRow,
    event: TrajectorySubmitted
    | TrajectoryPlaced
    | Predicted
    | Prioritized
    | Preempted
    | MigrationRequested
    | Migrated
    | Completed
    | Failed,
) -> None:
    match event:
        case TrajectorySubmitted():
            spec = event.spec
            row.group_id = spec.group_id
            row.traj_index = spec.index
            row.environment = spec.environment
            row.tool_pool = spec.tool_pool
            row.num_prompt_tokens = num_items(spec.prompt_token_ids)
            row.num_context_tokens = max(row.num_context_tokens, row.num_prompt_tokens)
            row.submitted_at = event.occurred_at
        case TrajectoryPlaced():
            row.worker_id = event.worker_id
            row.epoch = event.epoch
            if row.status in (TrajectoryStatus.SUBMITTED, TrajectoryStatus.INTERRUPTED):
                row.status = TrajectoryStatus.PLACED
            rows.placements.append(placement_row(event))
        case Predicted():
            row.predicted_remaining_tokens = event.predicted_remaining_tokens
            rows.predictions.append(prediction_row(event))
        case Prioritized():
            row.priority = event.priority
        case Preempted():
            row.num_preemptions += 1
            row.status = TrajectoryStatus.WAITING
        case MigrationRequested():
            rows.migrations[event.event_id] = migration_row(event)
        case Migrated():
            _apply_migrated(rows, row, event)
        case Completed():
            _apply_completed(row, event)
        case Failed():
            if event.retryable:
                row.status = TrajectoryStatus.INTERRUPTED
            elif event.resubmitted_as:
                row.status = TrajectoryStatus.RESUBMITTED
            else:
                row.status = TrajectoryStatus.FAILED
            row.failure_reason = event.reason
            if not event.retryable:
                row.completed_at = event.occurred_at


def _apply_migrated(rows: BatchRows, trajectory: TrajectoryRow, event: Migrated) -> None:
    migration = _open_migration(rows, event)
    if migration is None:
        migration = rows.migrations[event.event_id] = MigrationRow(
            event_id=event.event_id,
            rollout_id=event.rollout_id,
            traj_id=event.traj_id,
            source_worker_id=event.source_worker_id,
            target_worker_id=event.target_worker_id,
        )
    migration.status = MigrationStatus.DONE
    migration.migrated_at = event.occurred_at
    migration.num_context_tokens = event.num_context_tokens
    migration.num_bytes = event.num_bytes
    migration.kv_transferred = event.kv_transferred
    migration.transfer_s = event.transfer_s
    trajectory.num_migrations += 1
    trajectory.migration_s += event.transfer_s
    trajectory.worker_id = event.target_worker_id
    trajectory.epoch = event.target_epoch


def _open_migration(rows: BatchRows, event: Migrated) -> MigrationRow | None:
    """The earliest requested, not yet done migration of the trajectory between the same
    workers (requests are keyed by event id, which carries no order: sort by request time)."""
    candidates = [
        row
        for row in rows.migrations.values()
        if row.status is MigrationStatus.REQUESTED
        and row.rollout_id == event.rollout_id
        and row.traj_id == event.traj_id
        and row.source_worker_id == event.source_worker_id
        and row.target_worker_id == event.target_worker_id
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda row: (row.requested_at or 0.0, row.event_id))


def _apply_completed(row: TrajectoryRow, event: Completed) -> None:
    row.status = TrajectoryStatus.COMPLETED
    row.reward = event.reward
    row.finish_reason = event.finish_reason
    row.num_steps = max(row.num_steps, event.num_steps)
    row.completed_at = event.occurred_at
    if event.num_output_tokens:
        row.num_output_tokens = event.num_output_tokens
    if event.num_recomputed_tokens:
        row.num_recomputed_tokens = event.num_recomputed_tokens
    num_prompt_tokens = num_items(event.prompt_token_ids)
    num_response_tokens = num_items(event.response_token_ids)
    if num_prompt_tokens:
        row.num_prompt_tokens = num_prompt_tokens
    if num_prompt_tokens or num_response_tokens:
        row.num_context_tokens = num_prompt_tokens + num_response_tokens
    timings = event.timings
    if timings != _NO_TIMINGS:
        row.queue_s = timings.queue_s
        row.prefill_s = timings.prefill_s
        row.decode_s = timings.decode_s
        row.tool_s = timings.tool_s
        row.migration_s = timings.migration_s
        row.total_s = timings.total_s
