"""worker weights: the weight version each worker last loaded

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 03:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(
            sa.Column("weight_version", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("weights_loaded_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("weights_loaded_at")
        batch.drop_column("weight_version")
