"""The placement decider: initial placement, per-step routing, migrations, worker failures."""

from __future__ import annotations

import random
from collections.abc import Callable

import events_factory as b
import pytest

from heddle.control.bundle import DEFAULT_PLACEMENT_HEDGE, ControlOptions
from heddle.control.placement import PlacementDecider, PresortedPlacer, RouterPlacer
from heddle.events import (
    ContinueTrajectory,
    Event,
    Failed,
    MigrationRequested,
    Prioritized,
    ReshardRequested,
    StartTrajectory,
    TrajectoryPlaced,
    WorkerRetired,
)
from heddle.policy.cost.model import AnalyticCostModel, preset
from heddle.policy.migration.planner import MigrationRequest
from heddle.policy.prediction import PredictorOptions, make_predictor


def cost_for_tp(tp: int) -> AnalyticCostModel:
    return preset("qwen3-32b", "h200", tp)


def presorted() -> PlacementDecider:
    return PlacementDecider(lambda: PresortedPlacer(cost_for_tp, hysteresis=0.0))


def routed(router: str, threshold: int | None = None) -> PlacementDecider:
    rng = random.Random(0)
    return PlacementDecider(lambda: RouterPlacer(router, rng, locality_threshold_tokens=threshold))


def feed(decider: PlacementDecider, events: list[Event]) -> list[object]:
    outputs: list[object] = []
    for event in events:
        outputs += decider.decide(event)
    return outputs


def opening(num: int, workers: list[tuple[str, int]]) -> list[Event]:
    events: list[Event] = [b.worker(w, tp) for w, tp in workers]
    events.append(b.rollout(num))
    events += [b.submitted(f"t{i}", i) for i in range(num)]
    return events


def starts(outputs: list[object]) -> dict[str, str]:
    return {o.traj_id: o.worker_id for o in outputs if isinstance(o, StartTrajectory)}


def test_presorted_placement_waits_for_every_first_prediction() -> None:
    decider = presorted()
    lengths = [100.0, 9000.0, 300.0, 8000.0, 50.0, 200.0]
    assert feed(decider, opening(6, [("w0", 1), ("w1", 1)])) == []
    outputs = feed(decider, [b.predicted(f"t{i}", -1, n) for i, n in enumerate(lengths[:-1])])
    assert outputs == []
    outputs = decider.decide(b.predicted("t5", -1, lengths[5]))
    placed = [o for o in outputs if isinstance(o, TrajectoryPlaced)]
    assert len(placed) == 6 and len(starts(outputs)) == 6
    # Presorted groups are contiguous in length order: the longest runs apart from the rest.
    by_worker = starts(outputs)
    assert [t for t, w in by_worker.items() if w == by_worker["t1"]] == ["t1"]
    ranks = {p.traj_id: p.group_rank for p in placed}
    assert [ranks[f"t{i}"] for i in range(6)] == [4, 0, 2, 1, 5, 3]
    start = next(o for o in outputs if isinstance(o, StartTrajectory) and o.traj_id == "t1")
    assert not start.resume and start.command_id == "r1:t1:0:initial:e1:start"
    assert start.epoch == 1


def test_heterogeneous_workers_give_the_longest_trajectories_high_tp() -> None:
    decider = presorted()
    feed(decider, opening(4, [("small", 1), ("big", 8)]))
    outputs = feed(
        decider, [b.predicted(f"t{i}", -1, n) for i, n in enumerate([50_000, 100, 120, 90])]
    )
    assert starts(outputs)["t0"] == "big"
    tps = {o.traj_id: o.tp_degree for o in outputs if isinstance(o, TrajectoryPlaced)}
    assert tps["t0"] == 8


def test_steps_continue_on_their_worker_with_the_latest_priority() -> None:
    decider = presorted()
    feed(decider, opening(2, [("w0", 1)]))
    feed(decider, [b.predicted("t0", -1, 10.0), b.predicted("t1", -1, 20.0)])
    decider.decide(
        Prioritized(
            event_id="p",
            rollout_id=b.ROLLOUT,
            occurred_at=1.0,
            traj_id="t0",
            worker_id="w0",
            priority=7.0,
        )
    )
    decider.decide(b.generated("t0", 0, 5))
    decider.decide(b.tool_called("t0", 0))
    (step,) = decider.decide(b.tool_returned("t0", 0))
    assert isinstance(step, ContinueTrajectory)
    assert (step.worker_id, step.step, step.priority) == ("w0", 1, 7.0)
    assert step.tool_result.step == 0
    assert decider.decide(b.tool_returned("t0", 0)) == []  # duplicate: routed already


def test_a_grown_prediction_requests_a_migration_once() -> None:
    decider = presorted()
    feed(decider, opening(4, [("w0", 1), ("w1", 1)]))
    outputs = feed(
        decider, [b.predicted(f"t{i}", -1, n) for i, n in enumerate([9000, 8000, 100, 90])]
    )
    short_worker = starts(outputs)["t3"]
    long_worker = starts(outputs)["t0"]
    decider.decide(b.generated("t3", 0, 50, worker_id=short_worker))
    decider.decide(b.tool_called("t3", 0, worker_id=short_worker))
    (request,) = decider.decide(b.predicted("t3", 0, 20_000.0))
    assert isinstance(request, MigrationRequested)
    assert (request.source_worker_id, request.target_worker_id) == (short_worker, long_worker)
    assert decider.decide(b.predicted("t3", 0, 20_001.0)) == []  # same target: asked already
    decider.decide(b.migrated("t3", short_worker, long_worker))
    assert decider.worker_of(b.ROLLOUT, "t3") == long_worker
    (step,) = decider.decide(b.tool_returned("t3", 0))
    assert isinstance(step, ContinueTrajectory) and step.worker_id == long_worker


def test_least_load_router_rebalances_each_step_with_a_resume() -> None:
    decider = routed("least_load")
    outputs = feed(decider, opening(3, [("w0", 1), ("w1", 1)]))
    assert starts(outputs) == {"t0": "w0", "t1": "w1", "t2": "w0"}  # ties: first registered
    for traj_id, worker_id in (("t0", "w0"), ("t1", "w1")):
        decider.decide(b.generated(traj_id, 0, 5, worker_id=worker_id))
        decider.decide(b.tool_called(traj_id, 0, worker_id=worker_id))
    placed, start = decider.decide(b.tool_returned("t0", 0))  # w0 still runs t2: go to w1
    assert isinstance(placed, TrajectoryPlaced) and isinstance(start, StartTrajectory)
    assert (start.worker_id, start.resume, start.source_worker_id) == ("w1", True, "w0")
    assert placed.reason == "migration" and decider.worker_of(b.ROLLOUT, "t0") == "w1"


def test_cache_affinity_router_is_sticky() -> None:
    decider = routed("cache_affinity")
    outputs = feed(decider, opening(3, [("w0", 1), ("w1", 1)]))
    home = starts(outputs)["t0"]
    for step in range(3):
        decider.decide(b.generated("t0", step, 5, worker_id=home))
        decider.decide(b.tool_called("t0", step, worker_id=home))
        (out,) = decider.decide(b.tool_returned("t0", step))
        assert isinstance(out, ContinueTrajectory) and out.worker_id == home


def test_locality_threshold_keeps_long_contexts_home() -> None:
    decider = routed("least_load", threshold=150)
    outputs = feed(decider, opening(2, [("w0", 1), ("w1", 1)]))
    home = starts(outputs)["t0"]
    decider.decide(b.generated("t0", 0, 80, worker_id=home))  # context 100 + 80 + 10 >= 150
    decider.decide(b.tool_called("t0", 0, worker_id=home))
    (out,) = decider.decide(b.tool_returned("t0", 0, tokens=10))
    assert isinstance(out, ContinueTrajectory) and out.worker_id == home


def test_a_failed_worker_s_trajectories_are_replaced_with_resume() -> None:
    decider = routed("cache_affinity")
    outputs = feed(decider, opening(4, [("w0", 1), ("w1", 1), ("w2", 1)]))
    lost = sorted(t for t, w in starts(outputs).items() if w == "w1")
    assert lost
    replaced = decider.decide(b.worker_failed("w1"))
    restarts = [o for o in replaced if isinstance(o, StartTrajectory)]
    assert sorted(o.traj_id for o in restarts) == lost
    assert all(o.resume and o.worker_id in ("w0", "w2") for o in restarts)
    reasons = {o.reason for o in replaced if isinstance(o, TrajectoryPlaced)}
    assert reasons == {"replacement"}
    assert decider.decide(b.worker_failed("w1")) == []


def test_an_ended_rollout_is_forgotten_and_not_placed_again() -> None:
    decider = routed("cache_affinity")
    outputs = feed(decider, opening(2, [("w0", 1)]))
    assert len(starts(outputs)) == 2
    decider.decide(b.completed("t0", 1, 5))
    decider.decide(b.completed("t1", 1, 5))
    workers, _, rollouts, ended, *_ = decider.snapshot()
    assert rollouts == {} and ended == frozenset({b.ROLLOUT}) and "w0" in workers
    assert feed(decider, opening(2, [("w0", 1)])) == []  # a redelivered submission


def test_the_placement_hedge_is_zero_only_for_exact_predictions() -> None:
    def options(name: str, hedge: float | None = None) -> ControlOptions:
        predictor = make_predictor(name, PredictorOptions())
        return ControlOptions(cost_for_tp=cost_for_tp, predictor=predictor, placement_hedge=hedge)

    assert options("oracle").effective_placement_hedge == 0.0
    assert options("noisy_oracle").effective_placement_hedge == DEFAULT_PLACEMENT_HEDGE
    assert options("noisy_oracle", 0.2).effective_placement_hedge == 0.2


@pytest.mark.parametrize(
    ("make", "needs_predictions"), [(presorted, True), (lambda: routed("least_load"), False)]
)
def test_a_resubmitted_trajectory_is_placed_on_its_own_after_its_rollout_was(
    make: Callable[[], PlacementDecider], needs_predictions: bool
) -> None:
    decider = make()
    feed(decider, opening(2, [("w0", 1), ("w1", 1)]))
    feed(decider, [b.predicted(f"t{i}", -1, 100.0) for i in range(2)])
    stale = Failed(
        event_id="t0:failed", rollout_id=b.ROLLOUT, occurred_at=5.0, traj_id="t0", step=1,
        reason="stale", finish_reason="stale", resubmitted_as="t0-r1",
    )  # fmt: skip
    feed(decider, [stale, b.completed("t1", 2, 50)])  # every trajectory of the placement ended
    outputs = decider.decide(b.submitted("t0-r1", 0))
    if needs_predictions:  # presorted: planned on its first prediction
        assert outputs == []
        outputs = decider.decide(b.predicted("t0-r1", -1, 80.0))
    assert set(starts(outputs)) == {"t0-r1"}
    placed = [o for o in outputs if isinstance(o, TrajectoryPlaced)]
    assert [p.traj_id for p in placed] == ["t0-r1"] and placed[0].reason == "initial"
    feed(decider, [b.completed("t0-r1", 2, 50)])
    assert decider.decide(b.submitted("t0-r1", 0)) == []  # the rollout ended: nothing again


def test_a_trajectory_handed_back_retryably_is_placed_again_on_another_worker() -> None:
    decider = routed("least_load")
    outputs = feed(decider, opening(2, [("w0", 1), ("w1", 1)]))
    first = starts(outputs)["t0"]
    refused = Failed(
        event_id="t0:failed:w", rollout_id=b.ROLLOUT, occurred_at=5.0, traj_id="t0", step=0,
        reason="worker is draining", worker_id=first, retryable=True,
    )  # fmt: skip
    outputs = decider.decide(refused)
    (start,) = [o for o in outputs if isinstance(o, StartTrajectory)]
    (placed,) = [o for o in outputs if isinstance(o, TrajectoryPlaced)]
    assert start.traj_id == placed.traj_id == "t0" and start.resume
    assert start.worker_id == placed.worker_id != first and placed.reason == "replacement"
    assert feed(decider, [b.completed("t1", 1, 10)]) == []
    assert decider.decide(b.completed("t0", 1, 10)) == []  # it ran to its end there


def reshard_requested(leader: str, members: list[str], tp: int) -> ReshardRequested:
    return ReshardRequested(
        event_id=f"reshard:{leader}",
        occurred_at=5.0,
        worker_id=leader,
        reshard_id=f"reshard:{leader}",
        member_worker_ids=members,
        node="n0",
        tp_degree=tp,
        gpu_ids=list(range(tp)),
    )


def retired(worker_id: str, leader: str, at: float = 6.0) -> WorkerRetired:
    return WorkerRetired(
        event_id=f"{worker_id}:retired",
        occurred_at=at,
        worker_id=worker_id,
        reshard_id=f"reshard:{leader}",
        successor_worker_id=leader,
    )


def placed_on_four_workers() -> tuple[PlacementDecider, dict[str, str]]:
    decider = presorted()
    lengths = [9000.0, 8900.0, 8800.0, 8700.0]  # one per worker
    workers = [(f"w{i}", 2) for i in range(4)]
    feed(decider, opening(4, workers))
    outputs = feed(decider, [b.predicted(f"t{i}", -1, n) for i, n in enumerate(lengths)])
    return decider, starts(outputs)


def test_a_retired_workers_trajectories_go_to_the_reshards_leader() -> None:
    decider, where = placed_on_four_workers()
    assert sorted(where.values()) == ["w0", "w1", "w2", "w3"]
    members = ["w0", "w1", "w2", "w3"]
    assert decider.decide(reshard_requested("w0", members, 8)) == []
    moved_from = where["t1"]
    leader_of = {traj: w for traj, w in where.items()}
    outputs = decider.decide(retired(moved_from, "w0"))
    placed = [o for o in outputs if isinstance(o, TrajectoryPlaced)]
    assert [(p.traj_id, p.worker_id, p.reason) for p in placed] == [("t1", "w0", "reshard")]
    (start,) = [o for o in outputs if isinstance(o, StartTrajectory)]
    assert start.resume and start.source_worker_id == moved_from
    assert moved_from not in decider.snapshot()[0]  # forgotten
    assert leader_of["t0"] == "w0"
    assert decider.snapshot()[1]["w0"] == 2  # t1 generates there now, beside t0


class MovingPlacer(PresortedPlacer):
    """Presorted placement that asks, on every later prediction, to move the trajectory to
    ``target`` (the migration requests' own checks are under test)."""

    def __init__(self, target: str) -> None:
        super().__init__(cost_for_tp, hysteresis=0.0)
        self.target = target

    def on_prediction(self, traj_id: str, predicted: float, **_: object) -> MigrationRequest | None:
        source = self._worker_of.get(traj_id, "")
        return MigrationRequest(traj_id, source, self.target, 0, predicted)


@pytest.mark.parametrize(
    ("traj_id", "target"), [("t0", "w3"), ("t0", "w2"), ("t3", "w0"), ("t0", "w1")]
)
def test_no_migration_leaves_or_targets_a_resharding_worker_until_the_leader_is_back(
    traj_id: str, target: str
) -> None:
    """w2 and w3 re-shard (w2 leads): t3 may not leave w3, nothing may go to w3; others move."""
    decider = PlacementDecider(lambda: MovingPlacer(target))
    workers = [(f"w{i}", 2) for i in range(4)]
    feed(decider, opening(4, workers))
    lengths = [9000.0, 8900.0, 8800.0, 8700.0]
    where = starts(feed(decider, [b.predicted(f"t{i}", -1, n) for i, n in enumerate(lengths)]))
    assert where == {"t0": "w0", "t1": "w1", "t2": "w2", "t3": "w3"}
    decider.decide(reshard_requested("w2", ["w2", "w3"], 4))
    shrink = [b.generated(traj_id, 0, 100, where[traj_id]), b.predicted(traj_id, 0, 10.0)]
    moves = [o for o in feed(decider, shrink) if isinstance(o, MigrationRequested)]
    is_blocked = {where[traj_id], target} & {"w2", "w3"}
    assert [m.target_worker_id for m in moves] == ([] if is_blocked else [target])
    assert decider.snapshot()[-1] == frozenset({("w2", "w2"), ("w3", "w2")})
    decider.decide(retired("w3", "w2"))
    decider.decide(b.worker("w2", 4, at=40.0))  # the leader is back at TP4
    assert decider.snapshot()[-1] == frozenset()
    assert decider.snapshot()[0]["w2"].tp_degree == 4
