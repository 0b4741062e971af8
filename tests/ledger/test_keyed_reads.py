"""Rows by composite key (``heddle.ledger.keyed_reads``) against a filter over every row, on
SQLite and PostgreSQL; on SQLite the lookup searches the primary-key index, never scans."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Table, delete, insert, select

from heddle.ledger import Ledger, MigrationStatus, TrajectoryStatus
from heddle.ledger.database import open_ledger
from heddle.ledger.keyed_reads import _statement, rows_by_key
from heddle.ledger.tables import Migration, Step, Trajectory

_trajectories: Table = Trajectory.__table__  # type: ignore[assignment]
_steps: Table = Step.__table__  # type: ignore[assignment]
_migrations: Table = Migration.__table__  # type: ignore[assignment]

_ids = st.sampled_from(["r1", "r2"])
_trajs = st.sampled_from(["t0", "t1", "t2"])


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    stored=st.sets(st.tuples(_ids, _trajs, st.integers(0, 3))),
    wanted=st.lists(st.tuples(_ids, _trajs, st.integers(0, 4)), min_size=1, max_size=8),
)
def test_steps_by_key_are_those_a_filter_finds(
    ledger: Ledger, stored: set[tuple[str, str, int]], wanted: list[tuple[str, str, int]]
) -> None:
    with ledger.engine.begin() as connection:
        connection.execute(delete(_steps))
        if stored:
            rows = [
                {"rollout_id": r, "traj_id": t, "step": s, "num_output_tokens": s * 10}
                for r, t, s in stored
            ]
            connection.execute(insert(_steps), rows)
        found = rows_by_key(connection, _steps, ("rollout_id", "traj_id", "step"), wanted)
        keys = sorted((row["rollout_id"], row["traj_id"], row["step"]) for row in found)
        every = connection.execute(select(_steps)).mappings().all()
    expected = sorted(key for key in wanted if key in stored)
    assert keys == expected
    assert {
        (row["rollout_id"], row["traj_id"], row["step"]): row["num_output_tokens"] for row in every
    } == {key: key[2] * 10 for key in stored}


def test_values_come_back_as_sqlalchemy_reads_them(ledger: Ledger) -> None:
    with ledger.engine.begin() as connection:
        connection.execute(
            insert(_trajectories),
            [
                {
                    "rollout_id": "r",
                    "traj_id": "a",
                    "status": TrajectoryStatus.IN_TOOL,
                    "reward": None,
                },
                {
                    "rollout_id": "r",
                    "traj_id": "b",
                    "status": TrajectoryStatus.WAITING,
                    "reward": 0.5,
                },
            ],
        )
        migration = {
            "rollout_id": "r",
            "traj_id": "a",
            "source_worker_id": "w1",
            "target_worker_id": "w2",
        }
        connection.execute(
            insert(_migrations),
            [
                {
                    **migration,
                    "event_id": "m1",
                    "kv_transferred": True,
                    "status": MigrationStatus.REQUESTED,
                },
                {
                    **migration,
                    "event_id": "m2",
                    "kv_transferred": False,
                    "status": MigrationStatus.DONE,
                },
            ],
        )
        keyed = list(
            rows_by_key(
                connection, _trajectories, ("rollout_id", "traj_id"), [("r", "a"), ("r", "b")]
            )
        )
        reference = [dict(row) for row in connection.execute(select(_trajectories)).mappings()]
        requested = list(
            rows_by_key(
                connection,
                _migrations,
                ("rollout_id", "traj_id"),
                [("r", "a")],
                equal=(("status", MigrationStatus.REQUESTED.value),),
            )
        )
    assert sorted(keyed, key=lambda row: row["traj_id"]) == sorted(
        reference, key=lambda row: row["traj_id"]
    )
    assert (
        keyed[0]["status"] is TrajectoryStatus.IN_TOOL
        or keyed[1]["status"] is TrajectoryStatus.IN_TOOL
    )
    assert [row["event_id"] for row in requested] == ["m1"]
    assert requested[0]["kv_transferred"] is True
    assert requested[0]["status"] is MigrationStatus.REQUESTED


def test_sqlite_searches_the_index_for_each_key(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    open_ledger(f"sqlite:///{path}").close()
    for table, key_columns, extra in (
        (_steps, ("rollout_id", "traj_id", "step"), ()),
        (_trajectories, ("rollout_id", "traj_id"), ()),
        (_migrations, ("rollout_id", "traj_id"), ("status",)),
    ):
        sql = _statement(table, key_columns, extra, 50, "?")
        parameters = ["r", "t", 1][: len(key_columns)] * 50 + ["requested"] * len(extra)
        with sqlite3.connect(path) as connection:
            plan = [row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", parameters)]
        search = f"SEARCH {table.name} USING "
        searches = [step for step in plan if step.startswith(search)]
        # one index search per key on every key column, not on the rollout alone
        assert any(all(f"{c}=?" in step for c in key_columns) for step in searches), plan
        assert f"SCAN {table.name}" not in plan, plan
