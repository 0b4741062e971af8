"""Placement under weight swaps: which workers still swap, whose KV a swap makes stale, and what
that does to the moves the placer calls for and the KV the transfer decider ships."""

from __future__ import annotations

import events_factory as b
import msgspec
import pytest

from heddle.control.placement import (
    PlacementDecider,
    PlacementRequest,
    PresortedPlacer,
    WorkerInfo,
)
from heddle.control.placement.weight_swaps import WeightSwaps
from heddle.control.transfer import TransferDecider
from heddle.events import (
    Event,
    Generated,
    MigrateOut,
    MigrationRequested,
    StartTrajectory,
    WeightsLoaded,
    WeightSource,
    WeightsPublished,
)
from heddle.policy.cost.model import AnalyticCostModel, preset, weight_load_s
from heddle.policy.migration.planner import MigrationRequest, estimate_move


def cost_for_tp(tp: int) -> AnalyticCostModel:
    return preset("qwen3-32b", "h200", tp)


def published(version: int) -> WeightsPublished:
    return WeightsPublished(
        event_id=f"published:{version}",
        occurred_at=1.5,
        weight_version=version,
        source=WeightSource(path=f"/ckpt/v{version}"),
    )


def loaded(worker_id: str, version: int) -> WeightsLoaded:
    return WeightsLoaded(
        event_id=f"loaded:{worker_id}:{version}",
        occurred_at=1.6,
        weight_version=version,
        worker_id=worker_id,
    )


def on_version(event: Generated, version: int) -> Generated:
    return msgspec.structs.replace(event, weight_version=version)


def test_a_publication_makes_every_worker_swap_until_it_loads() -> None:
    swaps = WeightSwaps(lambda tp: 10.0 / tp)
    workers = {"a": WorkerInfo("a", 1), "b": WorkerInfo("b", 2)}
    for worker_id in workers:
        swaps.registered(worker_id)
    assert swaps.pauses(workers) == {} and not swaps.is_stale(0)
    swaps.published(published(2))
    assert swaps.pauses(workers) == {"a": 10.0, "b": 5.0}
    assert swaps.is_stale(0) and swaps.is_stale(1) and not swaps.is_stale(2)
    swaps.loaded(loaded("a", 2))
    assert swaps.pauses(workers) == {"b": 5.0}
    swaps.published(published(1))  # not above the latest: nothing changes
    assert swaps.latest == 2 and not swaps.is_swapping("a")
    swaps.registered("a")  # a restart serves the weights it was launched with
    assert swaps.is_swapping("a")
    swaps.forget("b")
    assert swaps.pauses(workers) == {"a": 10.0}
    assert WeightSwaps().pauses(workers) == {}  # no load estimate: no pause counted


def _crowded() -> tuple[PlacementDecider, dict[str, str]]:
    """t3, predicted short on the short group's worker, sits in a tool gap."""
    decider = PlacementDecider(lambda: PresortedPlacer(cost_for_tp, hysteresis=0.0))
    events: list[Event] = [b.worker("w0"), b.worker("w1"), b.rollout(4)]
    events += [b.submitted(f"t{i}", i) for i in range(4)]
    outputs: list[object] = []
    for event in events:
        outputs += decider.decide(event)
    for i, n in enumerate([9000, 8000, 100, 90]):
        outputs += decider.decide(b.predicted(f"t{i}", -1, n))
    worker_of = {o.traj_id: o.worker_id for o in outputs if isinstance(o, StartTrajectory)}
    return decider, worker_of


def _migration(outputs: list[object]) -> MigrationRequested:
    (request,) = outputs
    assert isinstance(request, MigrationRequested)
    return request


def test_a_move_of_kv_computed_under_older_weights_transfers_none() -> None:
    decider, worker_of = _crowded()
    decider.decide(b.generated("t3", 0, 50, worker_id=worker_of["t3"]))  # on version 0
    decider.decide(b.tool_called("t3", 0, worker_id=worker_of["t3"]))
    decider.decide(published(1))
    request = _migration(decider.decide(b.predicted("t3", 0, 20_000.0)))
    assert not request.transfer_kv

    transfer = TransferDecider(transfer_kv=True)
    transfer.decide(b.tool_called("t3", 0, worker_id=worker_of["t3"]))
    (command,) = transfer.decide(request)
    assert isinstance(command, MigrateOut) and not command.transfer_kv


def test_kv_of_the_latest_weights_moves() -> None:
    decider, worker_of = _crowded()
    decider.decide(published(1))
    for worker_id in ("w0", "w1"):
        decider.decide(loaded(worker_id, 1))
    decider.decide(on_version(b.generated("t3", 0, 50, worker_id=worker_of["t3"]), 1))
    decider.decide(b.tool_called("t3", 0, worker_id=worker_of["t3"]))
    request = _migration(decider.decide(b.predicted("t3", 0, 20_000.0)))
    assert request.transfer_kv

    transfer = TransferDecider(transfer_kv=True)
    transfer.decide(b.tool_called("t3", 0, worker_id=worker_of["t3"]))
    (command,) = transfer.decide(request)
    assert isinstance(command, MigrateOut) and command.transfer_kv


def test_a_move_gains_the_pause_it_leaves_and_pays_the_one_it_meets() -> None:
    def gain(source_pause_s: float = 0.0, target_pause_s: float = 0.0) -> float:
        return estimate_move(
            cost_for_tp(1),
            cost_for_tp(4),
            source_batch=8,
            target_batch=2,
            context_tokens=4000,
            remaining_tokens=200.0,
            kv_transfer=True,
            source_pause_s=source_pause_s,
            target_pause_s=target_pause_s,
        ).gain_s

    load_s = weight_load_s("qwen3-32b", 4)
    assert load_s == pytest.approx(65.6e9 / (4 * 5e9))  # 65.6 GB of bf16 at 5 GB/s per GPU
    assert gain(target_pause_s=load_s) == pytest.approx(gain() - load_s)
    assert gain(source_pause_s=5.0) == pytest.approx(gain() + 5.0)


def test_a_stale_trajectory_moves_as_if_its_kv_moved() -> None:
    """Without KV transfer a move pays a re-prefill at the target; stale KV is re-prefilled
    wherever the trajectory runs, so the move costs nothing more than staying."""
    placer = PresortedPlacer(cost_for_tp, kv_transfer=False)
    requests = [PlacementRequest(f"t{i}", 1000.0, 500) for i in range(40)]
    placer.place(requests, [WorkerInfo("a", 1), WorkerInfo("b", 1)])
    worker_of: dict[str, str] = placer.snapshot()[0]  # type: ignore[index]
    for traj_id in [t for t, w in worker_of.items() if w == "a"][1:]:
        placer.on_finished(traj_id)  # a keeps one; b keeps its twenty
    mover = next(t for t, w in worker_of.items() if w == "b")

    def move(kv_is_stale: bool) -> object:
        return placer.on_prediction(
            mover, 1000.0, remaining_tokens=30.0, context_tokens=60_000, kv_is_stale=kv_is_stale
        )

    assert move(kv_is_stale=False) is None
    request = move(kv_is_stale=True)
    assert isinstance(request, MigrationRequest)
    assert request is not None and (request.source_id, request.target_id) == ("b", "a")
