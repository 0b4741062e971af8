"""migrations by trajectory: index migrations on (rollout_id, traj_id)

The projector reads a batch's open migrations by trajectory (``heddle.ledger.row_cache``); on
the rollout index alone each key searched every migration of its rollout (a 20-key read took
28 ms at 20,000 migrations in one rollout and 341 ms at 200,000; 0.05 and 0.6 ms with this
index). The new index's prefix serves the rollout lookups the old one did.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 22:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("migrations") as batch:
        batch.create_index("ix_migrations_rollout_id_traj_id", ["rollout_id", "traj_id"])
        batch.drop_index("ix_migrations_rollout_id")


def downgrade() -> None:
    with op.batch_alter_table("migrations") as batch:
        batch.create_index("ix_migrations_rollout_id", ["rollout_id"])
        batch.drop_index("ix_migrations_rollout_id_traj_id")
