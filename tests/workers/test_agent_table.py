"""The local trajectory table: phases of rows (their stage, at rest their log's), tombstones of
finished or departed trajectories."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from heddle.events import Completed, TrajectoryPhase, TrajectorySpec
from heddle.workers.agent.table import (
    RELEASED,
    HandedOver,
    HostedTrajectory,
    Running,
    TrajectoryTable,
)
from heddle.workers.agent.trajectory_log import TrajectoryLog
from heddle.workers.environments import create_environment

SPEC = TrajectorySpec(group_id="g", index=0, environment="trace")


def row(traj_id: str) -> HostedTrajectory:
    log = TrajectoryLog(rollout_id="r", traj_id=traj_id, spec=SPEC)
    log.host("w0", 1)
    return HostedTrajectory(log=log, spec=SPEC, env=create_environment("trace"))


def finish(hosted: HostedTrajectory) -> None:
    hosted.log.apply(
        Completed(event_id="c", rollout_id="r", traj_id=hosted.traj_id, occurred_at=0.0,
                  num_steps=0, worker_id="w0", epoch=1)
    )  # fmt: skip


async def test_rows_become_tombstones_only_at_rest() -> None:
    table = TrajectoryTable()
    hosted = row("t1")
    table.put(hosted)
    assert table.phase_of("r", "t1") is TrajectoryPhase.READY and hosted.settled.is_set()
    hosted.stage = Running(asyncio.create_task(asyncio.sleep(0)))
    hosted.settled.clear()
    assert table.phase_of("r", "t1") is TrajectoryPhase.GENERATING
    finish(hosted)
    table.compact("r", "t1")
    assert table.get("r", "t1") is hosted  # still running: kept
    hosted.settle()
    assert hosted.settled.is_set() and table.phase_of("r", "t1") is TrajectoryPhase.DONE
    table.compact("r", "t1")
    assert table.get("r", "t1") is None and table.phase_of("r", "t1") is TrajectoryPhase.DONE
    assert table.hosted() == []


def test_handed_over_rows_remember_the_target_and_released_rows_vanish() -> None:
    table = TrajectoryTable()
    moved, released = row("t1"), row("t2")
    moved.stage = HandedOver("w9")
    released.stage = RELEASED
    table.put(moved)
    table.put(released)
    assert table.phase_of("r", "t2") is TrajectoryPhase.ABSENT  # given back to the control plane
    for traj_id in ("t1", "t2"):
        table.compact("r", traj_id)
    assert (table.phase_of("r", "t1"), table.handed_to("r", "t1")) == (
        TrajectoryPhase.HANDED_OVER,
        "w9",
    )
    assert table.phase_of("r", "t2") is TrajectoryPhase.ABSENT
    table.put(row("t1"))  # migrated back here: a live row again
    assert table.phase_of("r", "t1") is TrajectoryPhase.READY and table.handed_to("r", "t1") == ""


@given(st.lists(st.integers(min_value=0, max_value=30), max_size=80), st.integers(1, 10))
def test_tombstones_are_bounded_and_keep_the_most_recent(ids: list[int], limit: int) -> None:
    table = TrajectoryTable(max_tombstones=limit)
    for number in ids:
        table.bury("r", f"t{number}")
    recent: list[int] = []
    for number in reversed(ids):
        if number not in recent:
            recent.append(number)
    kept = set(recent[:limit])
    for number in range(31):
        expected = TrajectoryPhase.DONE if number in kept else TrajectoryPhase.ABSENT
        assert table.phase_of("r", f"t{number}") is expected


async def test_settling_keeps_a_hand_over_or_a_release_made_while_running() -> None:
    """A segment that migrated its trajectory or gave it back ends in that stage, not at rest."""
    for stage, phase in ((HandedOver("w9"), TrajectoryPhase.HANDED_OVER), (RELEASED, None)):
        hosted = row("t1")
        hosted.stage = Running(asyncio.create_task(asyncio.sleep(0)))
        hosted.stage = stage
        hosted.settle()
        table = TrajectoryTable()
        table.put(hosted)
        assert hosted.stage == stage and hosted.settled.is_set()
        assert table.get("r", "t1") is (None if phase is None else hosted)
