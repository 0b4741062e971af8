"""gate leases: the event gate's state beside the rows it guards, and the hosting numbers

The projector puts every event through the event gate (``heddle.control.gate``) before folding
it, as the control plane does, so both act on the same facts. The gate's state of a rollout and
of a trajectory (``heddle.control.gate.RolloutLease``, ``heddle.control.leases.TrajectoryLease``)
is kept as JSON text in ``rollouts.lease`` and ``trajectories.lease``, written with the rows in
the projector's transaction. ``rollouts.trainer`` names the trainer that owns a rollout (its
records go to stream ``HEDDLE_OUT_<trainer>``), ``trajectories.epoch`` the hosting its holder
writes under.

Rows projected before this revision have no lease: their rollouts are refused further events
(rebuild such a ledger from the stream with ``heddle replay`` to project them).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06 03:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.add_column(
            sa.Column("trainer", sa.String(128), nullable=False, server_default="default")
        )
        batch.add_column(sa.Column("lease", sa.Text(), nullable=False, server_default=""))
    with op.batch_alter_table("trajectories") as batch:
        batch.add_column(sa.Column("epoch", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("lease", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("trajectories") as batch:
        batch.drop_column("lease")
        batch.drop_column("epoch")
    with op.batch_alter_table("rollouts") as batch:
        batch.drop_column("lease")
        batch.drop_column("trainer")
