"""The local trajectory table: phases of rows, tombstones of finished or departed trajectories."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from heddle.events import Completed, TrajectoryPhase, TrajectorySpec
from heddle.workers.agent.history import TrajectoryLog
from heddle.workers.agent.table import HostedTrajectory, TrajectoryTable
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


def test_rows_become_tombstones_only_at_rest() -> None:
    table = TrajectoryTable()
    hosted = row("t1")
    table.put(hosted)
    assert table.phase_of("r", "t1") is TrajectoryPhase.READY and hosted.settled.is_set()
    hosted.is_running = True
    assert table.phase_of("r", "t1") is TrajectoryPhase.GENERATING
    finish(hosted)
    table.compact("r", "t1")
    assert table.get("r", "t1") is hosted  # still running: kept
    hosted.is_running = False
    table.compact("r", "t1")
    assert table.get("r", "t1") is None and table.phase_of("r", "t1") is TrajectoryPhase.DONE
    assert table.hosted() == []


def test_handed_over_rows_remember_the_target_and_released_rows_vanish() -> None:
    table = TrajectoryTable()
    moved, released = row("t1"), row("t2")
    moved.handed_to = "w9"
    released.is_released = True
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
