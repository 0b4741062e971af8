"""initial ledger schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 01:29:32.315222
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "consumer_positions",
        sa.Column("consumer", sa.String(length=128), nullable=False),
        sa.Column("stream", sa.String(length=128), nullable=False),
        sa.Column("stream_sequence", sa.BigInteger(), nullable=False),
        sa.Column("num_events", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("consumer", name=op.f("pk_consumer_positions")),
    )
    op.create_table(
        "dead_letters",
        sa.Column("event_id", sa.String(length=320), nullable=False),
        sa.Column("rollout_id", sa.String(length=160), nullable=False),
        sa.Column("consumer", sa.String(length=128), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("stream_sequence", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_dead_letters")),
    )
    op.create_table(
        "migrations",
        sa.Column("event_id", sa.String(length=320), nullable=False),
        sa.Column("rollout_id", sa.String(length=160), nullable=False),
        sa.Column("traj_id", sa.String(length=160), nullable=False),
        sa.Column("source_worker_id", sa.String(length=160), nullable=False),
        sa.Column("target_worker_id", sa.String(length=160), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("predicted_remaining_tokens", sa.Float(), nullable=False),
        sa.Column("new_rank", sa.Integer(), nullable=False),
        sa.Column("requested_at", sa.Float(), nullable=True),
        sa.Column("migrated_at", sa.Float(), nullable=True),
        sa.Column("num_context_tokens", sa.BigInteger(), nullable=False),
        sa.Column("num_bytes", sa.BigInteger(), nullable=False),
        sa.Column("kv_transferred", sa.Boolean(), nullable=False),
        sa.Column("transfer_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_migrations")),
    )
    with op.batch_alter_table("migrations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_migrations_rollout_id"), ["rollout_id"], unique=False)

    op.create_table(
        "placements",
        sa.Column("event_id", sa.String(length=320), nullable=False),
        sa.Column("rollout_id", sa.String(length=160), nullable=False),
        sa.Column("traj_id", sa.String(length=160), nullable=False),
        sa.Column("worker_id", sa.String(length=160), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.Column("group_rank", sa.Integer(), nullable=False),
        sa.Column("tp_degree", sa.Integer(), nullable=False),
        sa.Column("placed_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_placements")),
    )
    with op.batch_alter_table("placements", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_placements_rollout_id"), ["rollout_id"], unique=False)

    op.create_table(
        "predictions",
        sa.Column("event_id", sa.String(length=320), nullable=False),
        sa.Column("rollout_id", sa.String(length=160), nullable=False),
        sa.Column("traj_id", sa.String(length=160), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("predicted_remaining_tokens", sa.Float(), nullable=False),
        sa.Column("predictor", sa.String(length=128), nullable=False),
        sa.Column("num_context_tokens", sa.BigInteger(), nullable=False),
        sa.Column("predicted_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_predictions")),
    )
    with op.batch_alter_table("predictions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_predictions_rollout_id"), ["rollout_id"], unique=False)

    op.create_table(
        "rollouts",
        sa.Column("rollout_id", sa.String(length=160), nullable=False),
        sa.Column("policy", sa.String(length=128), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("num_trajectories", sa.Integer(), nullable=False),
        sa.Column("time_scale", sa.Float(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("submitted_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("num_completed", sa.Integer(), nullable=False),
        sa.Column("num_failed", sa.Integer(), nullable=False),
        sa.Column("makespan_s", sa.Float(), nullable=False),
        sa.Column("num_output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cancel_reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("rollout_id", name=op.f("pk_rollouts")),
    )
    op.create_table(
        "steps",
        sa.Column("rollout_id", sa.String(length=160), nullable=False),
        sa.Column("traj_id", sa.String(length=160), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(length=160), nullable=False),
        sa.Column("num_input_tokens", sa.Integer(), nullable=False),
        sa.Column("num_context_tokens", sa.BigInteger(), nullable=False),
        sa.Column("num_cached_tokens", sa.BigInteger(), nullable=False),
        sa.Column("num_output_tokens", sa.Integer(), nullable=False),
        sa.Column("finish_reason", sa.String(length=16), nullable=False),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("queued_s", sa.Float(), nullable=False),
        sa.Column("queue_s", sa.Float(), nullable=False),
        sa.Column("prefill_s", sa.Float(), nullable=False),
        sa.Column("decode_s", sa.Float(), nullable=False),
        sa.Column("num_preemptions", sa.Integer(), nullable=False),
        sa.Column("num_recomputed_tokens", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(length=128), nullable=False),
        sa.Column("call_id", sa.String(length=160), nullable=False),
        sa.Column("tool_pool", sa.String(length=128), nullable=False),
        sa.Column("tool_status", sa.String(length=16), nullable=False),
        sa.Column("tool_exit_code", sa.Integer(), nullable=True),
        sa.Column("tool_s", sa.Float(), nullable=False),
        sa.Column("num_tool_output_tokens", sa.Integer(), nullable=False),
        sa.Column("executor_id", sa.String(length=160), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("generated_at", sa.Float(), nullable=True),
        sa.Column("tool_called_at", sa.Float(), nullable=True),
        sa.Column("tool_returned_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("rollout_id", "traj_id", "step", name=op.f("pk_steps")),
    )
    op.create_table(
        "trajectories",
        sa.Column("rollout_id", sa.String(length=160), nullable=False),
        sa.Column("traj_id", sa.String(length=160), nullable=False),
        sa.Column("group_id", sa.String(length=160), nullable=False),
        sa.Column("traj_index", sa.Integer(), nullable=False),
        sa.Column("environment", sa.String(length=128), nullable=False),
        sa.Column("tool_pool", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("worker_id", sa.String(length=160), nullable=False),
        sa.Column("predicted_remaining_tokens", sa.Float(), nullable=True),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("last_step", sa.Integer(), nullable=False),
        sa.Column("num_steps", sa.Integer(), nullable=False),
        sa.Column("num_prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("num_output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("num_context_tokens", sa.BigInteger(), nullable=False),
        sa.Column("num_tool_calls", sa.Integer(), nullable=False),
        sa.Column("num_preemptions", sa.Integer(), nullable=False),
        sa.Column("num_migrations", sa.Integer(), nullable=False),
        sa.Column("num_recomputed_tokens", sa.BigInteger(), nullable=False),
        sa.Column("queue_s", sa.Float(), nullable=False),
        sa.Column("prefill_s", sa.Float(), nullable=False),
        sa.Column("decode_s", sa.Float(), nullable=False),
        sa.Column("tool_s", sa.Float(), nullable=False),
        sa.Column("migration_s", sa.Float(), nullable=False),
        sa.Column("total_s", sa.Float(), nullable=False),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("finish_reason", sa.String(length=16), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=False),
        sa.Column("submitted_at", sa.Float(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("completed_at", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("rollout_id", "traj_id", name=op.f("pk_trajectories")),
    )
    op.create_table(
        "workers",
        sa.Column("worker_id", sa.String(length=160), nullable=False),
        sa.Column("engine", sa.String(length=128), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("tp_degree", sa.Integer(), nullable=False),
        sa.Column("max_running", sa.Integer(), nullable=False),
        sa.Column("max_kv_tokens", sa.BigInteger(), nullable=False),
        sa.Column("can_export_kv", sa.Boolean(), nullable=False),
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("incarnation", sa.String(length=160), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("registered_at", sa.Float(), nullable=True),
        sa.Column("last_heartbeat_at", sa.Float(), nullable=True),
        sa.Column("heartbeat_sequence", sa.BigInteger(), nullable=False),
        sa.Column("num_running", sa.Integer(), nullable=False),
        sa.Column("num_waiting", sa.Integer(), nullable=False),
        sa.Column("num_trajectories", sa.Integer(), nullable=False),
        sa.Column("kv_usage", sa.Float(), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("worker_id", name=op.f("pk_workers")),
    )


def downgrade() -> None:
    op.drop_table("workers")
    op.drop_table("trajectories")
    op.drop_table("steps")
    op.drop_table("rollouts")
    with op.batch_alter_table("predictions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_predictions_rollout_id"))

    op.drop_table("predictions")
    with op.batch_alter_table("placements", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_placements_rollout_id"))

    op.drop_table("placements")
    with op.batch_alter_table("migrations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_migrations_rollout_id"))

    op.drop_table("migrations")
    op.drop_table("dead_letters")
    op.drop_table("consumer_positions")
