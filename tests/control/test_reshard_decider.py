"""The re-shard decider: a lone straggler beside idle GPUs of its node gets them (the others
retire, then the leader relaunches at the union of their GPUs), and never while work waits for
admission, a migration touches a member, a member fails, or a worker does not say its node."""

from __future__ import annotations

import events_factory as b
import msgspec

from heddle.control.decider import Output, rebuild_decider
from heddle.control.reshard import ReshardConfig, ReshardDecider
from heddle.events import (
    Event,
    MigrationRequested,
    Reshard,
    ReshardRequested,
    Retire,
    TrajectoryPlaced,
    TrajectorySubmitted,
    WorkerRegistered,
    WorkerRetired,
)
from heddle.policy.cost.model import preset, weight_load_s

TP1_NODE = [f"w{i}" for i in range(8)]


def registered(
    worker_id: str, gpu: int, node: str = "n0", tp: int = 1, at: float = 0.0
) -> WorkerRegistered:
    return WorkerRegistered(
        event_id=f"{worker_id}:registered:{tp}",
        occurred_at=at,
        worker_id=worker_id,
        engine="sim",
        tp_degree=tp,
        node=node,
        gpu_ids=list(range(gpu, gpu + tp)),
    )


def placed(traj_id: str, worker_id: str, at: float = 0.0) -> TrajectoryPlaced:
    return TrajectoryPlaced(
        event_id=f"{b.ROLLOUT}:{traj_id}:placed:{worker_id}",
        rollout_id=b.ROLLOUT,
        occurred_at=at,
        traj_id=traj_id,
        worker_id=worker_id,
    )


def retired(worker_id: str, request: ReshardRequested, at: float = 20.0) -> WorkerRetired:
    return WorkerRetired(
        event_id=f"{worker_id}:retired",
        occurred_at=at,
        worker_id=worker_id,
        reshard_id=request.reshard_id,
        successor_worker_id=request.worker_id,
    )


def decider(restart_s: float = 30.0) -> ReshardDecider:
    return ReshardDecider(
        lambda tp: preset("qwen3-32b", "h200", tp),
        lambda tp: weight_load_s("qwen3-32b", tp),
        ReshardConfig(restart_s=restart_s),
    )


def tail(straggler_tokens: float = 12_000.0, workers: list[str] = TP1_NODE) -> list[Event]:
    """Eight TP1 workers of one node, a trajectory on each; all but t0 finish at 10 s, and t0
    is predicted to run ``straggler_tokens`` more."""
    events: list[Event] = [registered(w, i) for i, w in enumerate(workers)]
    events.append(b.rollout(len(workers)))
    for i, worker in enumerate(workers):
        events += [b.submitted(f"t{i}", i), placed(f"t{i}", worker)]
    events.append(b.predicted("t0", -1, straggler_tokens))
    events += [b.completed(f"t{i}", 1, 100, at=10.0) for i in range(1, len(workers))]
    return events


def decide_all(reshard: ReshardDecider, events: list[Event]) -> list[Output]:
    return [output for event in events for output in reshard.decide(event)]


def test_a_lone_straggler_gets_its_node_at_tp8() -> None:
    reshard = decider()
    outputs = decide_all(reshard, tail())
    requests = [o for o in outputs if isinstance(o, ReshardRequested)]
    assert len(requests) == 1
    request = requests[0]
    assert (request.worker_id, request.tp_degree, request.node) == ("w0", 8, "n0")
    assert request.member_worker_ids == TP1_NODE and request.gpu_ids == list(range(8))
    assert request.predicted_resharded_s < request.predicted_current_s
    retire = [o for o in outputs if isinstance(o, Retire)]
    assert [o.worker_id for o in retire] == TP1_NODE[1:]
    assert {o.successor_worker_id for o in retire} == {"w0"}

    outputs = decide_all(reshard, [retired(w, request) for w in TP1_NODE[1:-1]])
    assert not [o for o in outputs if isinstance(o, Reshard)]  # w7 still holds its GPU
    (command,) = reshard.decide(retired("w7", request))
    assert isinstance(command, Reshard)
    assert (command.worker_id, command.tp_degree, command.gpu_ids) == ("w0", 8, list(range(8)))

    again = decide_all(reshard, [registered("w0", 0, tp=8, at=60.0), b.predicted("t0", 0, 9e3)])
    assert again == []  # one worker left on the node: nothing to merge


def test_a_short_straggler_is_left_where_it_is() -> None:
    outputs = decide_all(decider(), tail(straggler_tokens=1500.0))
    assert outputs == []


def test_a_prediction_past_the_trajectory_s_token_cap_counts_only_the_room_left() -> None:
    """A straggler predicted 500,000 more tokens (the online predictor's error on long tails:
    ``heddle.control.reshard.view``): with its context capped 1,500 tokens past its prompt, it
    has 1,500 at most, and is left where it is (as a short straggler is); with the default cap
    (131,072) the node merges."""
    capped = [
        msgspec.structs.replace(e, spec=msgspec.structs.replace(e.spec, max_total_tokens=1600))
        if isinstance(e, TrajectorySubmitted) and e.traj_id == "t0"
        else e
        for e in tail(straggler_tokens=500_000.0)
    ]
    assert decide_all(decider(), capped) == []
    outputs = decide_all(decider(), tail(straggler_tokens=500_000.0))
    assert [o.worker_id for o in outputs if isinstance(o, ReshardRequested)] == ["w0"]


def test_a_long_restart_is_not_worth_it() -> None:
    outputs = decide_all(decider(restart_s=600.0), tail())
    assert outputs == []


def test_nothing_while_a_trajectory_waits_for_admission() -> None:
    events = tail()
    events.insert(len(TP1_NODE) + 1, b.submitted("late", 99))  # submitted, never placed
    assert decide_all(decider(), events) == []


def test_nothing_while_a_migration_touches_a_member() -> None:
    events = tail()
    move = MigrationRequested(
        event_id="move",
        rollout_id=b.ROLLOUT,
        occurred_at=5.0,
        traj_id="t0",
        source_worker_id="w0",
        target_worker_id="w1",
    )
    first_completion = len(events) - (len(TP1_NODE) - 1)
    events.insert(first_completion, move)
    assert decide_all(decider(), events) == []
    landed = [
        *events[: first_completion + 1],
        b.migrated("t0", "w0", "w1", 9.0),
        *events[first_completion + 1 :],
    ]
    requests = [o for o in decide_all(decider(), landed) if isinstance(o, ReshardRequested)]
    assert [r.worker_id for r in requests] == ["w1"]  # the straggler's worker now leads


def test_workers_that_do_not_say_their_node_are_never_merged() -> None:
    events = [
        WorkerRegistered(event_id=f"{w}:r", occurred_at=0.0, worker_id=w, engine="sim")
        if isinstance(e, WorkerRegistered) and (w := e.worker_id)
        else e
        for e in tail()
    ]
    assert decide_all(decider(), events) == []


def test_a_failed_member_abandons_the_reshard() -> None:
    reshard = decider()
    request = next(o for o in decide_all(reshard, tail()) if isinstance(o, ReshardRequested))
    decide_all(reshard, [retired(w, request) for w in TP1_NODE[1:-1]])
    assert reshard.decide(b.worker_failed("w7", at=21.0)) == []
    assert reshard.decide(retired("w7", request)) == []  # no Reshard for the abandoned one


def test_replay_rebuilds_the_same_state() -> None:
    live = decider()
    events = tail()
    decide_all(live, events)
    fresh = decider()
    rebuild_decider(fresh, events)
    assert fresh.snapshot() == live.snapshot()
