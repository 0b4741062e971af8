"""operator actions: steering requests recorded on the stream

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 00:05:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "operator_actions",
        sa.Column("event_id", sa.String(length=320), nullable=False),
        sa.Column("kind", sa.String(length=128), nullable=False),
        sa.Column("rollout_id", sa.String(length=160), nullable=False),
        sa.Column("traj_id", sa.String(length=160), nullable=False),
        sa.Column("worker_id", sa.String(length=160), nullable=False),
        sa.Column("operator", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("priority", sa.Float(), nullable=True),
        sa.Column("pin", sa.Boolean(), nullable=False),
        sa.Column("requested_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_operator_actions")),
    )


def downgrade() -> None:
    op.drop_table("operator_actions")
