"""The ledger rows one event makes whole and that never change afterwards: placements,
predictions, migration requests and dead letters (part of ``heddle.ledger.fold``).
"""

from __future__ import annotations

from heddle.events import DeadLettered, MigrationRequested, Predicted, TrajectoryPlaced
from heddle.ledger.rows import DeadLetterRow, MigrationRow, PlacementRow, PredictionRow


def placement_row(event: TrajectoryPlaced) -> PlacementRow:
    return PlacementRow(
        event_id=event.event_id,
        rollout_id=event.rollout_id,
        traj_id=event.traj_id,
        worker_id=event.worker_id,
        reason=event.reason,
        group_rank=event.group_rank,
        tp_degree=event.tp_degree,
        placed_at=event.occurred_at,
    )


def prediction_row(event: Predicted) -> PredictionRow:
    return PredictionRow(
        event_id=event.event_id,
        rollout_id=event.rollout_id,
        traj_id=event.traj_id,
        step=event.step,
        predicted_remaining_tokens=event.predicted_remaining_tokens,
        predictor=event.predictor,
        num_context_tokens=event.num_context_tokens,
        predicted_at=event.occurred_at,
    )


def migration_row(event: MigrationRequested) -> MigrationRow:
    return MigrationRow(
        event_id=event.event_id,
        rollout_id=event.rollout_id,
        traj_id=event.traj_id,
        source_worker_id=event.source_worker_id,
        target_worker_id=event.target_worker_id,
        predicted_remaining_tokens=event.predicted_remaining_tokens,
        new_rank=event.new_rank,
        requested_at=event.occurred_at,
    )


def dead_letter_row(event: DeadLettered) -> DeadLetterRow:
    return DeadLetterRow(
        event_id=event.event_id,
        rollout_id=event.rollout_id,
        consumer=event.consumer,
        subject=event.subject,
        stream_sequence=event.stream_sequence,
        reason=event.reason,
        payload=event.payload,
        recorded_at=event.occurred_at,
    )
