"""The transfer decider (endpoint-exclusive, longest first, only in tool gaps) and the rollout
decider (finishes once every trajectory ended)."""

from __future__ import annotations

import events_factory as b
import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.control.rollout import RolloutDecider
from heddle.control.transfer import TransferDecider
from heddle.events import (
    Event,
    Failed,
    MigrateOut,
    MigrationRequested,
    RolloutCancelled,
    RolloutFinished,
    TrajectorySubmitted,
)


def request(traj_id: str, source: str, target: str, length: float) -> MigrationRequested:
    return MigrationRequested(
        event_id=f"{traj_id}:{source}:{target}:req",
        rollout_id=b.ROLLOUT,
        occurred_at=1.0,
        traj_id=traj_id,
        source_worker_id=source,
        target_worker_id=target,
        predicted_remaining_tokens=length,
    )


def moves(outputs: list[object]) -> list[MigrateOut]:
    return [o for o in outputs if isinstance(o, MigrateOut)]


def test_transfers_start_only_in_a_tool_gap() -> None:
    decider = TransferDecider()
    assert decider.decide(request("t0", "w0", "w1", 100)) == []  # still generating
    (move,) = moves(decider.decide(b.tool_called("t0", 0)))
    assert (move.worker_id, move.target_worker_id, move.traj_id) == ("w0", "w1", "t0")
    assert move.migration_id == "t0:w0:w1:req:migration" and move.transfer_kv
    assert move.command_id == "t0:w0:w1:req:migration:migrate_out"


def test_endpoint_exclusive_longest_first_and_freed_on_migrated() -> None:
    decider = TransferDecider()
    for traj_id in ("a", "b", "c"):
        decider.decide(b.tool_called(traj_id, 0))
    assert moves(decider.decide(request("a", "w0", "w1", 10))) != []
    assert decider.decide(request("b", "w1", "w2", 99)) == []  # w1 is busy with "a"
    assert decider.decide(request("c", "w0", "w2", 50)) == []  # w0 too
    started = moves(decider.decide(b.migrated("a", "w0", "w1")))
    assert [m.traj_id for m in started] == ["b"]  # longest first; "c" needs w2 as well
    started = moves(decider.decide(b.migrated("b", "w1", "w2")))
    assert [m.traj_id for m in started] == ["c"]


def test_a_finished_trajectory_frees_its_endpoints_and_its_request() -> None:
    decider = TransferDecider()
    decider.decide(b.tool_called("a", 0))
    decider.decide(b.tool_called("b", 0))
    decider.decide(request("a", "w0", "w1", 10))
    assert decider.decide(request("b", "w0", "w2", 5)) == []
    (move,) = moves(decider.decide(b.completed("a", 1, 10)))
    assert move.traj_id == "b"


@settings(max_examples=80)
@given(
    st.lists(
        st.tuples(st.integers(0, 7), st.integers(0, 4), st.integers(0, 4), st.floats(0, 1e5)),
        min_size=1,
        max_size=25,
    )
)
def test_no_endpoint_ever_carries_two_transfers(
    requests: list[tuple[int, int, int, float]],
) -> None:
    decider = TransferDecider()
    busy: dict[str, str] = {}  # endpoint -> trajectory moving through it
    events: list[Event] = []
    for traj, source, target, length in requests:
        if source == target:
            continue
        traj_id = f"t{traj}"
        events += [b.tool_called(traj_id, 0), request(traj_id, f"w{source}", f"w{target}", length)]
    for index, event in enumerate(events):
        for move in moves(decider.decide(event)):
            for endpoint in (move.worker_id, move.target_worker_id):
                assert endpoint not in busy, f"{endpoint} carries two transfers"
                busy[endpoint] = move.traj_id
        if index % 3 == 2 and busy:  # finish the oldest transfer now and then
            traj_id = next(iter(busy.values()))
            ends = [e for e, t in busy.items() if t == traj_id]
            for endpoint in ends:
                del busy[endpoint]
            events.append(b.migrated(traj_id, ends[0], ends[-1]))


def test_rollout_finishes_once_every_trajectory_ended() -> None:
    decider = RolloutDecider()
    decider.decide(b.rollout(3, at=10.0))
    for index in range(3):
        decider.decide(b.submitted(f"t{index}", index))
    assert decider.decide(b.completed("ghost", 2, 100, at=15.0)) == []  # not its own
    assert decider.decide(b.completed("t0", 2, 100, at=20.0)) == []
    assert decider.decide(b.completed("t0", 2, 100, at=21.0)) == []  # duplicate
    retry = Failed(
        event_id="f",
        rollout_id=b.ROLLOUT,
        occurred_at=22.0,
        traj_id="t1",
        step=0,
        reason="worker died",
        retryable=True,
    )
    assert decider.decide(retry) == []  # it will be re-placed: not an end
    assert decider.decide(b.completed("t1", 1, 40, at=30.0)) == []
    final = Failed(
        event_id="g",
        rollout_id=b.ROLLOUT,
        occurred_at=40.0,
        traj_id="t2",
        step=3,
        reason="capacity",
    )
    (finished,) = decider.decide(final)
    assert isinstance(finished, RolloutFinished)
    assert (finished.num_completed, finished.num_failed) == (2, 1)
    assert (finished.makespan_s, finished.num_output_tokens) == (30.0, 140)
    assert decider.decide(b.completed("t2", 1, 1, at=50.0)) == []  # finished once


def stale(traj_id: str, resubmitted_as: str, at: float) -> Failed:
    return Failed(
        event_id=f"{traj_id}:failed",
        rollout_id=b.ROLLOUT,
        occurred_at=at,
        traj_id=traj_id,
        step=2,
        reason="stale",
        finish_reason="stale",
        resubmitted_as=resubmitted_as,
    )


def resubmittable(traj_id: str, index: int, attempt: int = 0) -> TrajectorySubmitted:
    event = b.submitted(traj_id, index)
    spec = msgspec.structs.replace(event.spec, max_staleness=0, max_attempts=2, attempt=attempt)
    return msgspec.structs.replace(event, spec=spec)


def test_a_stale_trajectory_with_attempts_left_runs_its_slot_again_under_a_new_id() -> None:
    decider = RolloutDecider()
    decider.decide(b.rollout(2, at=10.0))
    for index, traj_id in enumerate(("t0", "t1")):
        decider.decide(resubmittable(traj_id, index))
    (again,) = decider.decide(stale("t0", "t0-r1", at=20.0))
    assert isinstance(again, TrajectorySubmitted) and again.traj_id == "t0-r1"
    assert again.spec == msgspec.structs.replace(resubmittable("t0", 0).spec, attempt=1)
    assert decider.decide(stale("t0", "t0-r1", at=21.0)) == []  # a duplicate: once
    decider.decide(again)  # the control plane reads its own output back
    assert decider.decide(b.completed("t1", 1, 40, at=30.0)) == []  # the stale slot still runs
    (finished,) = decider.decide(b.completed("t0-r1", 3, 60, at=50.0))
    assert isinstance(finished, RolloutFinished)
    assert (finished.num_completed, finished.num_failed) == (2, 0)
    assert (finished.makespan_s, finished.num_output_tokens) == (40.0, 100)


def test_a_resubmission_without_attempts_left_ends_its_slot_and_a_cancelled_rollout_gets_none() -> (
    None
):
    decider = RolloutDecider()
    decider.decide(b.rollout(1))
    decider.decide(resubmittable("t0-r1", 0, attempt=1))  # its last attempt: spec not kept
    (finished,) = decider.decide(stale("t0-r1", "t0-r1-r2", at=5.0))
    assert isinstance(finished, RolloutFinished) and finished.num_failed == 1
    cancelled = RolloutDecider()
    cancelled.decide(b.rollout(1))
    cancelled.decide(resubmittable("t0", 0))
    cancelled.decide(RolloutCancelled(event_id="c", rollout_id=b.ROLLOUT, occurred_at=1.0))
    assert cancelled.decide(stale("t0", "t0-r1", at=2.0)) == []
