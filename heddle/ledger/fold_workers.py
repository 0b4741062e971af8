"""The fold of worker events into a worker's ledger row (part of ``heddle.ledger.fold``)."""

from __future__ import annotations

from heddle.events import (
    WeightsLoaded,
    WorkerDrained,
    WorkerFailed,
    WorkerHeartbeat,
    WorkerRegistered,
    WorkerRetired,
)
from heddle.ledger.rows import WorkerRow
from heddle.ledger.statuses import WorkerStatus


def apply_worker(
    row: WorkerRow,
    event: WorkerRegistered | WorkerHeartbeat | WorkerDrained | WorkerFailed | WorkerRetired,
) -> None:
    match event:
        case WorkerRegistered():
            row.engine = event.engine
            row.model = event.model
            row.tp_degree = event.tp_degree
            row.max_running = event.max_running
            row.max_kv_tokens = event.max_kv_tokens
            row.can_export_kv = event.can_export_kv
            row.host = event.host
            row.incarnation = event.incarnation
            row.weight_version, row.weights_loaded_at = 0, None  # started on its own weights
            row.status = WorkerStatus.ACTIVE
            row.failure_reason = ""
            row.registered_at = event.occurred_at
        case WorkerHeartbeat():
            row.last_heartbeat_at = event.occurred_at
            row.heartbeat_sequence = event.sequence
            row.num_running = event.num_running
            row.num_waiting = event.num_waiting
            row.num_trajectories = event.num_trajectories
            row.kv_usage = event.kv_usage
        case WorkerDrained():
            row.status = WorkerStatus.DRAINED
        case WorkerFailed():
            row.status = WorkerStatus.FAILED
            row.failure_reason = event.reason
        case WorkerRetired():
            row.status = WorkerStatus.RETIRED


def apply_weights(row: WorkerRow, event: WeightsLoaded) -> None:
    if event.incarnation and row.incarnation and event.incarnation != row.incarnation:
        return  # a previous incarnation's load: the current one starts on its own weights
    if event.weight_version >= row.weight_version:
        row.weight_version = event.weight_version
        row.weights_loaded_at = event.occurred_at
