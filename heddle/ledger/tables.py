"""The ledger schema: SQLAlchemy 2 typed tables (changed only through Alembic migrations).

The ledger is a projection of the event stream: every row is derived from events, so it can be
rebuilt by replay. Token id lists stay in the stream (the source of truth); the ledger keeps
counts. Times are Unix seconds from the events' ``occurred_at`` (the publishers' clocks) and
durations are model seconds, so a replay rebuilds exactly the same rows.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, Index, Integer, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from heddle.ledger.statuses import (
    MigrationStatus,
    RolloutStatus,
    StatusType,
    TrajectoryStatus,
    WorkerStatus,
)

_ID = String(160)
_NAME = String(128)


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Rollout(Base):
    __tablename__ = "rollouts"

    rollout_id: Mapped[str] = mapped_column(_ID, primary_key=True)
    policy: Mapped[str] = mapped_column(_NAME, default="")
    source: Mapped[str] = mapped_column(Text, default="")
    num_trajectories: Mapped[int] = mapped_column(Integer, default=0)
    time_scale: Mapped[float] = mapped_column(Float, default=1.0)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[RolloutStatus] = mapped_column(
        StatusType(RolloutStatus), default=RolloutStatus.RUNNING
    )
    submitted_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    num_completed: Mapped[int] = mapped_column(Integer, default=0)
    num_failed: Mapped[int] = mapped_column(Integer, default=0)
    makespan_s: Mapped[float] = mapped_column(Float, default=0.0)
    num_output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cancel_reason: Mapped[str] = mapped_column(Text, default="")
    trainer: Mapped[str] = mapped_column(_NAME, default="default")
    """The trainer that owns it (its records go to stream ``HEDDLE_OUT_<trainer>``)."""
    lease: Mapped[str] = mapped_column(Text, default="")
    """The event gate's state of the rollout, JSON (``heddle.ledger.gated_fold``)."""


class Trajectory(Base):
    __tablename__ = "trajectories"

    rollout_id: Mapped[str] = mapped_column(_ID, primary_key=True)
    traj_id: Mapped[str] = mapped_column(_ID, primary_key=True)
    group_id: Mapped[str] = mapped_column(_ID, default="")
    traj_index: Mapped[int] = mapped_column(Integer, default=0)
    environment: Mapped[str] = mapped_column(_NAME, default="")
    tool_pool: Mapped[str] = mapped_column(_NAME, default="default")
    status: Mapped[TrajectoryStatus] = mapped_column(
        StatusType(TrajectoryStatus), default=TrajectoryStatus.SUBMITTED
    )
    worker_id: Mapped[str] = mapped_column(_ID, default="")
    predicted_remaining_tokens: Mapped[float | None] = mapped_column(Float)
    priority: Mapped[float] = mapped_column(Float, default=0.0)
    last_step: Mapped[int] = mapped_column(Integer, default=-1)
    """Highest step index seen (-1: none yet)."""
    num_steps: Mapped[int] = mapped_column(Integer, default=0)
    num_prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    num_output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    num_context_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    num_tool_calls: Mapped[int] = mapped_column(Integer, default=0)
    num_preemptions: Mapped[int] = mapped_column(Integer, default=0)
    """Preempted events (control-plane preemptions)."""
    num_migrations: Mapped[int] = mapped_column(Integer, default=0)
    num_recomputed_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    queue_s: Mapped[float] = mapped_column(Float, default=0.0)
    prefill_s: Mapped[float] = mapped_column(Float, default=0.0)
    decode_s: Mapped[float] = mapped_column(Float, default=0.0)
    tool_s: Mapped[float] = mapped_column(Float, default=0.0)
    migration_s: Mapped[float] = mapped_column(Float, default=0.0)
    total_s: Mapped[float] = mapped_column(Float, default=0.0)
    reward: Mapped[float | None] = mapped_column(Float)
    finish_reason: Mapped[str] = mapped_column(String(16), default="")
    failure_reason: Mapped[str] = mapped_column(Text, default="")
    submitted_at: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    completed_at: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[float | None] = mapped_column(Float)
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    """The hosting its holder writes under (``TrajectoryPlaced.epoch``)."""
    lease: Mapped[str] = mapped_column(Text, default="")
    """The event gate's state of the trajectory, JSON (``heddle.ledger.gated_fold``)."""


class Step(Base):
    """One trajectory step: a generation and the tool call that follows it (if any)."""

    __tablename__ = "steps"

    rollout_id: Mapped[str] = mapped_column(_ID, primary_key=True)
    traj_id: Mapped[str] = mapped_column(_ID, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    worker_id: Mapped[str] = mapped_column(_ID, default="")
    num_input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    """Tokens appended before the generation (the previous tool's observation)."""
    num_context_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    num_cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    num_output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    finish_reason: Mapped[str] = mapped_column(String(16), default="")
    priority: Mapped[float] = mapped_column(Float, default=0.0)
    queued_s: Mapped[float] = mapped_column(Float, default=0.0)
    """Wait on the worker before the engine started the step."""
    queue_s: Mapped[float] = mapped_column(Float, default=0.0)
    prefill_s: Mapped[float] = mapped_column(Float, default=0.0)
    decode_s: Mapped[float] = mapped_column(Float, default=0.0)
    num_preemptions: Mapped[int] = mapped_column(Integer, default=0)
    """Preemptions the engine reported for this generation."""
    num_recomputed_tokens: Mapped[int] = mapped_column(Integer, default=0)
    tool: Mapped[str] = mapped_column(_NAME, default="")
    call_id: Mapped[str] = mapped_column(_ID, default="")
    tool_pool: Mapped[str] = mapped_column(_NAME, default="")
    tool_status: Mapped[str] = mapped_column(String(16), default="")
    tool_exit_code: Mapped[int | None] = mapped_column(Integer)
    tool_s: Mapped[float] = mapped_column(Float, default=0.0)
    num_tool_output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    executor_id: Mapped[str] = mapped_column(_ID, default="")
    started_at: Mapped[float | None] = mapped_column(Float)
    generated_at: Mapped[float | None] = mapped_column(Float)
    tool_called_at: Mapped[float | None] = mapped_column(Float)
    tool_returned_at: Mapped[float | None] = mapped_column(Float)


class Worker(Base):
    __tablename__ = "workers"

    worker_id: Mapped[str] = mapped_column(_ID, primary_key=True)
    engine: Mapped[str] = mapped_column(_NAME, default="")
    model: Mapped[str] = mapped_column(Text, default="")
    tp_degree: Mapped[int] = mapped_column(Integer, default=1)
    max_running: Mapped[int] = mapped_column(Integer, default=0)
    max_kv_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    can_export_kv: Mapped[bool] = mapped_column(default=False)
    host: Mapped[str] = mapped_column(_NAME, default="")
    incarnation: Mapped[str] = mapped_column(_ID, default="")
    status: Mapped[WorkerStatus] = mapped_column(
        StatusType(WorkerStatus), default=WorkerStatus.ACTIVE
    )
    registered_at: Mapped[float | None] = mapped_column(Float)
    last_heartbeat_at: Mapped[float | None] = mapped_column(Float)
    heartbeat_sequence: Mapped[int] = mapped_column(BigInteger, default=0)
    num_running: Mapped[int] = mapped_column(Integer, default=0)
    num_waiting: Mapped[int] = mapped_column(Integer, default=0)
    num_trajectories: Mapped[int] = mapped_column(Integer, default=0)
    kv_usage: Mapped[float] = mapped_column(Float, default=0.0)
    failure_reason: Mapped[str] = mapped_column(Text, default="")
    weight_version: Mapped[int] = mapped_column(BigInteger, default=0)
    """The weight version the worker last reported loaded (``weights.loaded``; 0: initial)."""
    weights_loaded_at: Mapped[float | None] = mapped_column(Float)


class Placement(Base):
    __tablename__ = "placements"

    event_id: Mapped[str] = mapped_column(String(320), primary_key=True)
    rollout_id: Mapped[str] = mapped_column(_ID, index=True)
    traj_id: Mapped[str] = mapped_column(_ID)
    worker_id: Mapped[str] = mapped_column(_ID)
    reason: Mapped[str] = mapped_column(String(16))
    group_rank: Mapped[int] = mapped_column(Integer, default=0)
    tp_degree: Mapped[int] = mapped_column(Integer, default=1)
    placed_at: Mapped[float] = mapped_column(Float)


class Migration(Base):
    """A requested migration and, once it happened, its outcome."""

    __tablename__ = "migrations"
    __table_args__ = (Index("ix_migrations_rollout_id_traj_id", "rollout_id", "traj_id"),)
    """The projector reads a batch's open migrations by trajectory."""

    event_id: Mapped[str] = mapped_column(String(320), primary_key=True)
    """Id of the MigrationRequested event (of the Migrated event when none was requested)."""
    rollout_id: Mapped[str] = mapped_column(_ID)
    traj_id: Mapped[str] = mapped_column(_ID)
    source_worker_id: Mapped[str] = mapped_column(_ID)
    target_worker_id: Mapped[str] = mapped_column(_ID)
    status: Mapped[MigrationStatus] = mapped_column(
        StatusType(MigrationStatus), default=MigrationStatus.REQUESTED
    )
    predicted_remaining_tokens: Mapped[float] = mapped_column(Float, default=0.0)
    new_rank: Mapped[int] = mapped_column(Integer, default=0)
    requested_at: Mapped[float | None] = mapped_column(Float)
    migrated_at: Mapped[float | None] = mapped_column(Float)
    num_context_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    num_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    kv_transferred: Mapped[bool] = mapped_column(default=False)
    transfer_s: Mapped[float] = mapped_column(Float, default=0.0)


class Prediction(Base):
    __tablename__ = "predictions"

    event_id: Mapped[str] = mapped_column(String(320), primary_key=True)
    rollout_id: Mapped[str] = mapped_column(_ID, index=True)
    traj_id: Mapped[str] = mapped_column(_ID)
    step: Mapped[int] = mapped_column(Integer)
    predicted_remaining_tokens: Mapped[float] = mapped_column(Float)
    predictor: Mapped[str] = mapped_column(_NAME)
    num_context_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    predicted_at: Mapped[float] = mapped_column(Float)


class DeadLetter(Base):
    __tablename__ = "dead_letters"

    event_id: Mapped[str] = mapped_column(String(320), primary_key=True)
    rollout_id: Mapped[str] = mapped_column(_ID, default="")
    consumer: Mapped[str] = mapped_column(_NAME)
    subject: Mapped[str] = mapped_column(Text)
    stream_sequence: Mapped[int] = mapped_column(BigInteger)
    reason: Mapped[str] = mapped_column(Text)
    payload: Mapped[str] = mapped_column(Text, default="")
    recorded_at: Mapped[float] = mapped_column(Float)


class OperatorAction(Base):
    """An operator's steering request, as recorded on the stream (``heddle.events.operator``):
    one row per request, whatever its effect; no other row is created for its ids."""

    __tablename__ = "operator_actions"

    event_id: Mapped[str] = mapped_column(String(320), primary_key=True)
    kind: Mapped[str] = mapped_column(_NAME)
    """The event's tag: ``worker.drain_requested``, ``traj.abort_requested``, ..."""
    rollout_id: Mapped[str] = mapped_column(_ID, default="")
    traj_id: Mapped[str] = mapped_column(_ID, default="")
    worker_id: Mapped[str] = mapped_column(_ID, default="")
    operator: Mapped[str] = mapped_column(_NAME, default="")
    reason: Mapped[str] = mapped_column(Text, default="")
    priority: Mapped[float | None] = mapped_column(Float, nullable=True)
    pin: Mapped[bool] = mapped_column(Boolean, default=False)
    requested_at: Mapped[float] = mapped_column(Float)


class ConsumerPosition(Base):
    """Last stream sequence a projection consumer committed (written with its batch)."""

    __tablename__ = "consumer_positions"

    consumer: Mapped[str] = mapped_column(_NAME, primary_key=True)
    stream: Mapped[str] = mapped_column(_NAME)
    stream_sequence: Mapped[int] = mapped_column(BigInteger, default=0)
    num_events: Mapped[int] = mapped_column(BigInteger, default=0)
    """Events projected so far (those above the position are skipped as already seen)."""
    updated_at: Mapped[float] = mapped_column(Float, default=0.0)
    """Wall-clock time of the last commit (not part of the projection)."""


metadata = Base.metadata
PROJECTED_TABLES = (
    Rollout.__table__,
    Trajectory.__table__,
    Step.__table__,
    Worker.__table__,
    Placement.__table__,
    Migration.__table__,
    Prediction.__table__,
    DeadLetter.__table__,
    OperatorAction.__table__,
)
"""Tables derived from events (compared by ``heddle replay --verify``)."""
