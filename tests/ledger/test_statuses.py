"""The typed status columns: values fit the stored column, read back as members, and an unknown
stored value is refused rather than passed on as a bare string."""

from __future__ import annotations

import pytest
from sqlalchemy import Column, MetaData, String, Table, create_engine, insert, select

from heddle.ledger.statuses import (
    MigrationStatus,
    RolloutStatus,
    StatusType,
    TrajectoryStatus,
    WorkerStatus,
)
from heddle.ledger.tables import PROJECTED_TABLES

STATUSES = (RolloutStatus, TrajectoryStatus, WorkerStatus, MigrationStatus)


@pytest.mark.parametrize("status_type", STATUSES)
def test_values_fit_the_column(status_type: type[RolloutStatus]) -> None:
    assert all(len(member.value) <= 16 for member in status_type)


def test_every_status_column_is_typed() -> None:
    typed = {
        table.name: column.type.status_type
        for table in PROJECTED_TABLES
        for column in table.columns
        if isinstance(column.type, StatusType)
    }
    assert typed == {
        "rollouts": RolloutStatus,
        "trajectories": TrajectoryStatus,
        "workers": WorkerStatus,
        "migrations": MigrationStatus,
    }


def test_round_trip_and_unknown_values() -> None:
    metadata = MetaData()
    typed = Table("t", metadata, Column("status", StatusType(TrajectoryStatus)))
    raw = Table("t", MetaData(), Column("status", String(16)))
    engine = create_engine("sqlite://")
    metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(insert(typed), [{"status": s} for s in TrajectoryStatus])
        read = connection.execute(select(typed.c.status)).scalars().all()
        assert read == list(TrajectoryStatus)
        assert all(type(value) is TrajectoryStatus for value in read)
        stored = connection.execute(select(raw.c.status)).scalars().all()
        assert stored == [member.value for member in TrajectoryStatus]
        connection.execute(insert(raw), [{"status": "bogus"}])
        with pytest.raises(ValueError, match="bogus"):
            connection.execute(select(typed.c.status)).scalars().all()
