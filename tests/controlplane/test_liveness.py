"""Worker liveness: silent workers are failed once with the trajectories placed on them, a new
registration revives a worker, heartbeats from the replayed past count by their own time, and a
cancelled rollout's trajectories are aborted where they are."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.controlplane.liveness import WorkerLiveness
from heddle.events import (
    Abort,
    Completed,
    Migrated,
    RolloutCancelled,
    TrajectoryPlaced,
    WorkerFailed,
    WorkerHeartbeat,
    WorkerRegistered,
    WorkerRetired,
)


def registered(worker_id: str, at: float, incarnation: str = "a") -> WorkerRegistered:
    return WorkerRegistered(
        event_id=f"{worker_id}:{incarnation}:registered",
        occurred_at=at,
        worker_id=worker_id,
        engine="sim",
        incarnation=incarnation,
    )


def heartbeat(worker_id: str, at: float) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        event_id=f"{worker_id}:hb:{at}", occurred_at=at, worker_id=worker_id, sequence=1
    )


def placed(traj_id: str, worker_id: str) -> TrajectoryPlaced:
    return TrajectoryPlaced(
        event_id=f"r:{traj_id}:{worker_id}:placed",
        rollout_id="r",
        occurred_at=1.0,
        traj_id=traj_id,
        worker_id=worker_id,
    )


def test_a_silent_worker_fails_once_with_what_it_held() -> None:
    liveness = WorkerLiveness(timeout_s=3.0)
    for event in (registered("w0", 0.0), registered("w1", 0.0), placed("t1", "w0")):
        liveness.decide(event)
    liveness.decide(placed("t2", "w1"))
    liveness.decide(
        Migrated(
            event_id="m",
            rollout_id="r",
            occurred_at=1.0,
            traj_id="t2",
            source_worker_id="w1",
            target_worker_id="w0",
        )
    )
    liveness.decide(heartbeat("w1", 2.5))
    assert liveness.check(3.0) == []
    (failure,) = liveness.check(4.0)
    assert failure.worker_id == "w0"
    assert failure.trajectory_ids == ["t1", "t2"]
    assert failure.event_id == "w0:a:failed"  # the id the worker agent uses itself
    assert [f.worker_id for f in liveness.check(100.0)] == ["w1"]
    assert liveness.check(200.0) == []
    assert liveness.live_workers() == []


def test_a_new_registration_revives_and_keeps_the_placements() -> None:
    liveness = WorkerLiveness(timeout_s=1.0)
    liveness.decide(registered("w0", 0.0))
    liveness.decide(placed("t1", "w0"))
    assert [f.worker_id for f in liveness.check(5.0)] == ["w0"]
    liveness.decide(registered("w0", 6.0, incarnation="b"))
    assert liveness.live_workers() == ["w0"]
    liveness.decide(
        Completed(event_id="c", rollout_id="r", occurred_at=6.5, traj_id="t1", num_steps=1)
    )
    (failure,) = liveness.check(8.0)
    assert failure.event_id == "w0:b:failed" and failure.trajectory_ids == []


def test_a_re_shard_neither_fails_nor_rejoins_its_workers() -> None:
    """A retired member is gone on purpose, and a leader registering again at its new degree
    (a new incarnation) keeps what it holds: neither is a zombie to tell to rejoin."""
    liveness = WorkerLiveness(timeout_s=1.0)
    for event in (registered("w0", 0.0), registered("w1", 0.0), placed("t1", "w1")):
        assert liveness.decide(event) == []
    retired = WorkerRetired(
        event_id="w1:rs:retired",
        occurred_at=0.5,
        worker_id="w1",
        reshard_id="rs",
        successor_worker_id="w0",
        trajectory_ids=["t1"],
    )
    assert liveness.decide(retired) == []
    assert liveness.decide(placed("t1", "w0")) == []
    assert liveness.decide(registered("w0", 0.8, incarnation="b")) == []
    assert liveness.live_workers() == ["w0"]
    (failure,) = liveness.check(5.0)
    assert (failure.worker_id, failure.trajectory_ids) == ("w0", ["t1"])


def test_a_reported_failure_is_not_reported_again() -> None:
    liveness = WorkerLiveness(timeout_s=1.0)
    liveness.decide(registered("w0", 0.0))
    liveness.decide(
        WorkerFailed(event_id="x", occurred_at=0.5, worker_id="w0", reason="engine failed")
    )
    assert liveness.check(10.0) == []


def test_cancelling_a_rollout_aborts_its_trajectories_where_they_are() -> None:
    liveness = WorkerLiveness(timeout_s=1.0)
    liveness.decide(registered("w0", 0.0))
    liveness.decide(placed("t1", "w0"))
    aborts = liveness.decide(RolloutCancelled(event_id="rc", rollout_id="r", occurred_at=2.0))
    assert [(a.worker_id, a.traj_id) for a in aborts if isinstance(a, Abort)] == [("w0", "t1")]
    assert liveness.decide(RolloutCancelled(event_id="rc", rollout_id="r", occurred_at=2.0)) == []


@settings(max_examples=60)
@given(
    beats=st.lists(st.tuples(st.sampled_from(["w0", "w1", "w2"]), st.floats(0, 50)), max_size=30),
    checks=st.lists(st.floats(0, 80), min_size=1, max_size=6),
    timeout_s=st.floats(0.5, 20),
)
def test_failures_match_the_definition(
    beats: list[tuple[str, float]], checks: list[float], timeout_s: float
) -> None:
    """A worker is failed at the first check more than ``timeout_s`` after its last sign of
    life (all heartbeats happen before the checks), and never again."""
    liveness = WorkerLiveness(timeout_s)
    last_seen: dict[str, float] = {}
    for worker_id in ("w0", "w1", "w2"):
        liveness.decide(registered(worker_id, 0.0))
        last_seen[worker_id] = 0.0
    for worker_id, at in beats:
        liveness.decide(heartbeat(worker_id, at))
        last_seen[worker_id] = max(last_seen[worker_id], at)
    failed: set[str] = set()
    for now in sorted(checks):
        expected = {w for w, seen in last_seen.items() if now - seen > timeout_s} - failed
        reported = {failure.worker_id for failure in liveness.check(now)}
        assert reported == expected
        failed |= reported


def test_silence_counts_from_the_start_of_listening() -> None:
    """A restarted control plane heard no heartbeat sent while it was down: a worker registered
    long ago is failed one timeout after the start of listening, not at the first check, and a
    heartbeat heard live keeps it alive."""
    liveness = WorkerLiveness(timeout_s=3.0)
    liveness.decide(registered("w0", 0.0))
    liveness.decide(registered("w1", 0.0))
    liveness.start_listening(100.0)
    assert liveness.check(102.0) == []
    liveness.heard(heartbeat("w1", 102.5))
    assert [f.worker_id for f in liveness.check(103.5)] == ["w0"]
    assert [f.worker_id for f in liveness.check(106.0)] == ["w1"]


def test_a_reconnection_restarts_the_silence_and_an_earlier_time_does_not() -> None:
    """The control plane's connection came back at 200 (``start_listening`` again): silence
    before it was its own, not the worker's; a stale reconnection time changes nothing."""
    liveness = WorkerLiveness(timeout_s=3.0)
    liveness.decide(registered("w0", 0.0))
    liveness.start_listening(100.0)
    liveness.heard(heartbeat("w0", 150.0))
    liveness.start_listening(200.0)
    liveness.start_listening(120.0)
    assert liveness.check(202.9) == []
    assert [f.worker_id for f in liveness.check(203.5)] == ["w0"]


def test_heartbeats_heard_during_a_replay_outlive_the_replayed_registration() -> None:
    """A control plane that restarts or rebuilds its deciders listens from 50 and hears w0 at
    100 while the replay is still folding w0's registration of 10: w0 was alive at 100."""
    liveness = WorkerLiveness(timeout_s=3.0)
    liveness.start_listening(50.0)
    liveness.heard(heartbeat("w0", 100.0))
    liveness.decide(registered("w0", 10.0))
    assert liveness.check(102.0) == []
    assert [f.worker_id for f in liveness.check(103.5)] == ["w0"]
