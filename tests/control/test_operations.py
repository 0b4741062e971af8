"""The operators' view and decider (heddle.control.operations), the request decoding and checks
(heddle.control.ops_requests), and how the other deciders take operator events."""

from __future__ import annotations

import random

import events_factory as b
import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.control.operations import OperationsView, RequestRefused
from heddle.control.ops_requests import (
    MAX_REQUEST_BYTES,
    AbortRequest,
    CancelRequest,
    DrainRequest,
    ReprioritizeRequest,
    StatusQuery,
    UndrainRequest,
    decode_request,
    operator_event,
)
from heddle.control.placement import PlacementDecider, RouterPlacer
from heddle.control.priority import PriorityDecider
from heddle.controlplane.liveness import WorkerLiveness
from heddle.events import (
    Abort,
    Drain,
    Event,
    Failed,
    Prioritized,
    Reprioritize,
    RolloutCancelled,
    StartTrajectory,
    TrajectoryPlaced,
    Undrain,
    WorkerDrained,
)
from heddle.policy.scheduling.priority import priority_policy

R = b.ROLLOUT


def placed(traj_id: str, worker_id: str, at: float = 1.0) -> TrajectoryPlaced:
    return TrajectoryPlaced(
        event_id=f"{R}:{traj_id}:{worker_id}:{at}:placed",
        rollout_id=R,
        occurred_at=at,
        traj_id=traj_id,
        worker_id=worker_id,
    )


def event(request: object, request_id: str = "q1") -> Event:
    return operator_event(request, operator="ana", request_id=request_id, now_s=5.0)  # type: ignore[arg-type]


def opening() -> list[Event]:
    """Two workers, a rollout of three trajectories."""
    trajectories = [b.submitted(f"t{i}", i) for i in range(3)]
    return [b.worker("w0"), b.worker("w1"), b.rollout(3), *trajectories]


def view_with(*events: Event) -> OperationsView:
    view = OperationsView()
    for e in [*opening(), *events]:
        view.decide(e)
    return view


# ---- decoding and checks ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{oops", "malformed JSON"),
        (b'{"worker_id":"w0","bogus":1}', "unknown field `bogus`"),
        (b'{"worker_id":7}', "Expected `str`"),
        (b"{}", "missing required field `worker_id`"),
        (b'{"worker_id":"w 0"}', "not a valid id"),
        (b'{"worker_id":"w0","pad":"' + b"x" * MAX_REQUEST_BYTES + b'"}', "exceeds"),
    ],
)
def test_bad_requests_are_refused_with_400(body: bytes, fragment: str) -> None:
    with pytest.raises(RequestRefused) as refused:
        decode_request(DrainRequest, body)
    assert refused.value.code == 400 and fragment in refused.value.message


def test_an_empty_body_is_an_empty_query() -> None:
    assert decode_request(StatusQuery, b"") == StatusQuery()


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (DrainRequest(worker_id="nosuch"), 404),
        (UndrainRequest(worker_id="w0"), 409),  # active
        (AbortRequest(rollout_id="nosuch", traj_id="t0"), 404),
        (AbortRequest(rollout_id=R, traj_id="t9"), 404),
        (AbortRequest(rollout_id=R, traj_id="t1"), 409),  # completed
        (ReprioritizeRequest(rollout_id=R, traj_id="t0", priority=float("inf")), 400),
        (CancelRequest(rollout_id="nosuch"), 404),
    ],
)
def test_steering_is_checked_against_the_view(request_: object, code: int) -> None:
    view = view_with(placed("t0", "w0"), b.completed("t1", 1, 5))
    with pytest.raises(RequestRefused) as refused:
        view.check(request_)  # type: ignore[arg-type]
    assert refused.value.code == code


def test_a_valid_request_passes_and_becomes_its_event() -> None:
    view = view_with(placed("t0", "w0"))
    request = ReprioritizeRequest(rollout_id=R, traj_id="t0", priority=7.0, pin=True, reason="x")
    view.check(request)
    made = event(request)
    assert (made.operator, made.reason, made.event_id) == ("ana", "x", f"{R}:t0:op:q1:prio")


# ---- what the view emits ----------------------------------------------------------------------


def test_an_abort_goes_to_the_worker_holding_the_trajectory_now() -> None:
    view = view_with(placed("t0", "w0"), b.migrated("t0", "w0", "w1"))
    [abort] = view.decide(event(AbortRequest(rollout_id=R, traj_id="t0", reason="stuck")))
    assert isinstance(abort, Abort) and abort.worker_id == "w1"
    assert abort.reason == "aborted by ana: stuck"


def test_an_abort_of_a_trajectory_not_placed_yet_fails_it_at_once() -> None:
    [failed] = view_with().decide(event(AbortRequest(rollout_id=R, traj_id="t2")))
    assert isinstance(failed, Failed) and not failed.retryable


def test_nothing_is_emitted_for_a_trajectory_that_finished_meanwhile() -> None:
    view = view_with(placed("t0", "w0"), b.completed("t0", 1, 5))
    assert view.decide(event(AbortRequest(rollout_id=R, traj_id="t0"))) == []


def test_a_cancel_request_becomes_the_rollouts_cancellation_once() -> None:
    view = view_with()
    [cancelled] = view.decide(event(CancelRequest(rollout_id=R, reason="bad")))
    assert isinstance(cancelled, RolloutCancelled) and cancelled.reason == "cancelled by ana: bad"
    view.decide(cancelled)
    assert view.rollout(R).state.value == "cancelled"
    assert view.decide(event(CancelRequest(rollout_id=R), "q2")) == []


def test_drain_and_undrain_are_sent_once_each() -> None:
    view = view_with()
    [drain] = view.decide(event(DrainRequest(worker_id="w0")))
    assert isinstance(drain, Drain) and view.worker("w0").state.value == "draining"
    assert view.decide(event(DrainRequest(worker_id="w0"), "q2")) == []
    view.decide(WorkerDrained(event_id="w0:drained", occurred_at=6.0, worker_id="w0"))
    assert view.worker("w0").state.value == "drained"
    [undrain] = view.decide(event(UndrainRequest(worker_id="w0"), "q3"))
    assert isinstance(undrain, Undrain) and view.worker("w0").state.value == "active"


# ---- the other deciders ------------------------------------------------------------------------


def test_a_pinned_operator_priority_is_kept_and_sent_to_the_worker() -> None:
    decider = PriorityDecider(priority_policy("pps"))
    for e in (b.rollout(1), b.submitted("t0", 0), placed("t0", "w1")):
        decider.decide(e)
    request = ReprioritizeRequest(rollout_id=R, traj_id="t0", priority=1e9, pin=True)
    outputs = decider.decide(event(request))
    assert [type(o) for o in outputs] == [Prioritized, Reprioritize]
    assert isinstance(outputs[1], Reprioritize) and outputs[1].worker_id == "w1"
    assert decider.decide(b.predicted("t0", 0, 10.0)) == []  # pinned: the policy is ignored
    assert decider.priority_of(R, "t0") == 1e9


def test_an_unpinned_operator_priority_yields_to_the_policy_later() -> None:
    decider = PriorityDecider(priority_policy("pps"))
    for e in (b.rollout(1), b.submitted("t0", 0)):
        decider.decide(e)
    decider.decide(event(ReprioritizeRequest(rollout_id=R, traj_id="t0", priority=1e9)))
    decider.decide(b.predicted("t0", -1, 10.0))
    assert decider.priority_of(R, "t0") != 1e9


def test_a_draining_worker_gets_no_new_trajectory_until_undrained() -> None:
    decider = PlacementDecider(lambda: RouterPlacer("round_robin", random.Random(0)))
    events = opening()
    outputs = [
        o
        for e in [*events[:2], event(DrainRequest(worker_id="w1")), *events[2:]]
        for o in decider.decide(e)
    ]
    assert {o.worker_id for o in outputs if isinstance(o, StartTrajectory)} == {"w0"}
    undrain = event(UndrainRequest(worker_id="w1"), "q2")
    assert decider.decide(undrain) == []  # nothing waiting: everything was placed on w0


def test_a_drained_worker_is_never_declared_failed_until_undrained() -> None:
    liveness = WorkerLiveness(timeout_s=1.0)
    liveness.decide(b.worker("w0", at=0.0))
    liveness.decide(WorkerDrained(event_id="w0:d", occurred_at=0.5, worker_id="w0"))
    assert liveness.check(100.0) == []
    assert liveness.drained_workers() == ["w0"]
    liveness.decide(
        operator_event(UndrainRequest(worker_id="w0"), operator="", request_id="u", now_s=100.0)
    )
    assert liveness.check(100.5) == []
    [failure] = liveness.check(102.0)
    assert failure.worker_id == "w0"


# ---- property: aborts follow the trajectory, never a finished one --------------------------------

STEP = st.one_of(
    st.tuples(st.just("place"), st.sampled_from(["t0", "t1"]), st.sampled_from(["w0", "w1"])),
    st.tuples(st.just("finish"), st.sampled_from(["t0", "t1"]), st.just("")),
    st.tuples(st.just("abort"), st.sampled_from(["t0", "t1"]), st.just("")),
)


@given(st.lists(STEP, max_size=30))
def test_aborts_go_to_the_last_placement_and_never_to_a_finished_trajectory(
    steps: list[tuple[str, str, str]],
) -> None:
    """Reference: the history itself: the last placement before the request, unless a finish
    (or an earlier abort) came first."""
    view = view_with()
    history: list[tuple[str, str, str]] = []
    for index, (kind, traj_id, worker_id) in enumerate(steps):
        if kind == "place":
            view.decide(placed(traj_id, worker_id, at=float(index)))
        elif kind == "finish":
            view.decide(b.completed(traj_id, 1, 1, at=float(index)))
        else:
            request = AbortRequest(rollout_id=R, traj_id=traj_id)
            outputs = view.decide(event(request, f"q{index}"))
            mine = [h for h in history if h[1] == traj_id]
            if any(h[0] in ("finish", "abort") for h in mine):
                assert outputs == []
            elif not any(h[0] == "place" for h in mine):
                assert [type(o) for o in outputs] == [Failed]
                view.decide(outputs[0])  # type: ignore[arg-type]
            else:
                last = [h[2] for h in mine if h[0] == "place"][-1]
                assert [(type(o), o.worker_id) for o in outputs] == [(Abort, last)]  # type: ignore[union-attr]
                view.decide(b.completed(traj_id, 1, 1, at=float(index)))  # the worker ends it
        history.append((kind, traj_id, worker_id))
