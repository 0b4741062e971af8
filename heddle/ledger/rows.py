"""In-memory rows of the projection: one mutable struct per table row, fields = columns.

The projection folds a batch of events into these rows, then writes them with one statement per
table. They mirror ``heddle.ledger.tables`` field for field (a test keeps the two in step); the
defaults are the tables' defaults.
"""

from __future__ import annotations

from typing import Any

import msgspec

from heddle.ledger.statuses import MigrationStatus, RolloutStatus, TrajectoryStatus, WorkerStatus


class RolloutRow(msgspec.Struct, kw_only=True):
    rollout_id: str
    policy: str = ""
    source: str = ""
    num_trajectories: int = 0
    time_scale: float = 1.0
    labels: dict[str, Any] = {}
    status: RolloutStatus = RolloutStatus.RUNNING
    submitted_at: float | None = None
    finished_at: float | None = None
    num_completed: int = 0
    num_failed: int = 0
    makespan_s: float = 0.0
    num_output_tokens: int = 0
    cancel_reason: str = ""
    trainer: str = "default"
    lease: str = ""


class TrajectoryRow(msgspec.Struct, kw_only=True):
    rollout_id: str
    traj_id: str
    group_id: str = ""
    traj_index: int = 0
    environment: str = ""
    tool_pool: str = "default"
    status: TrajectoryStatus = TrajectoryStatus.SUBMITTED
    worker_id: str = ""
    predicted_remaining_tokens: float | None = None
    priority: float = 0.0
    last_step: int = -1
    num_steps: int = 0
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    num_context_tokens: int = 0
    num_tool_calls: int = 0
    num_preemptions: int = 0
    num_migrations: int = 0
    num_recomputed_tokens: int = 0
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    tool_s: float = 0.0
    migration_s: float = 0.0
    total_s: float = 0.0
    reward: float | None = None
    finish_reason: str = ""
    failure_reason: str = ""
    submitted_at: float | None = None
    started_at: float | None = None
    completed_at: float | None = None
    updated_at: float | None = None
    epoch: int = 0
    lease: str = ""


class StepRow(msgspec.Struct, kw_only=True):
    rollout_id: str
    traj_id: str
    step: int
    worker_id: str = ""
    num_input_tokens: int = 0
    num_context_tokens: int = 0
    num_cached_tokens: int = 0
    num_output_tokens: int = 0
    finish_reason: str = ""
    priority: float = 0.0
    queued_s: float = 0.0
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0
    tool: str = ""
    call_id: str = ""
    tool_pool: str = ""
    tool_status: str = ""
    tool_exit_code: int | None = None
    tool_s: float = 0.0
    num_tool_output_tokens: int = 0
    executor_id: str = ""
    started_at: float | None = None
    generated_at: float | None = None
    tool_called_at: float | None = None
    tool_returned_at: float | None = None


class WorkerRow(msgspec.Struct, kw_only=True):
    worker_id: str
    engine: str = ""
    model: str = ""
    tp_degree: int = 1
    max_running: int = 0
    max_kv_tokens: int = 0
    can_export_kv: bool = False
    host: str = ""
    incarnation: str = ""
    status: WorkerStatus = WorkerStatus.ACTIVE
    registered_at: float | None = None
    last_heartbeat_at: float | None = None
    heartbeat_sequence: int = 0
    num_running: int = 0
    num_waiting: int = 0
    num_trajectories: int = 0
    kv_usage: float = 0.0
    failure_reason: str = ""
    weight_version: int = 0
    weights_loaded_at: float | None = None


class PlacementRow(msgspec.Struct, kw_only=True):
    event_id: str
    rollout_id: str
    traj_id: str
    worker_id: str
    reason: str
    group_rank: int = 0
    tp_degree: int = 1
    placed_at: float


class MigrationRow(msgspec.Struct, kw_only=True):
    event_id: str
    rollout_id: str
    traj_id: str
    source_worker_id: str
    target_worker_id: str
    status: MigrationStatus = MigrationStatus.REQUESTED
    predicted_remaining_tokens: float = 0.0
    new_rank: int = 0
    requested_at: float | None = None
    migrated_at: float | None = None
    num_context_tokens: int = 0
    num_bytes: int = 0
    kv_transferred: bool = False
    transfer_s: float = 0.0


class PredictionRow(msgspec.Struct, kw_only=True):
    event_id: str
    rollout_id: str
    traj_id: str
    step: int
    predicted_remaining_tokens: float
    predictor: str
    num_context_tokens: int = 0
    predicted_at: float


class DeadLetterRow(msgspec.Struct, kw_only=True):
    event_id: str
    rollout_id: str = ""
    consumer: str
    subject: str
    stream_sequence: int
    reason: str
    payload: str = ""
    recorded_at: float


class OperatorActionRow(msgspec.Struct, kw_only=True):
    event_id: str
    kind: str
    rollout_id: str = ""
    traj_id: str = ""
    worker_id: str = ""
    operator: str = ""
    reason: str = ""
    priority: float | None = None
    pin: bool = False
    requested_at: float


TrajectoryKey = tuple[str, str]
StepKey = tuple[str, str, int]
