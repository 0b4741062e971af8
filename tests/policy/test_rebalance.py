"""Re-balancing moves against a brute force over explicit per-worker queues, and the placer's
use of them (moves only when they shorten the pairwise finish, never to a failed worker)."""

from __future__ import annotations

import math
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.control.placement import PlacementRequest, PresortedPlacer, WorkerInfo
from heddle.policy.cost.model import CostModel, preset
from heddle.policy.placement.rebalance import WorkerQueue, rebalance_target

COSTS = {tp: preset("qwen3-8b", "h200", tp) for tp in (1, 2, 4)}


def _step(cost: CostModel, batch: int, context: int) -> float:
    return cost.decode_step_s(batch, batch * context) if batch else 0.0


def brute_target(
    mover: float,
    queues: dict[str, tuple[int, list[float], float]],
    source: str,
    context: int,
    kv_transfer: bool,
    margin: float,
) -> str | None:
    """Every other worker tried with explicit lists: the mover's finish and the target's
    longest before and after the move, each after its worker's pause (nothing waits on an
    empty worker); the largest relative gain above ``margin`` wins."""
    tp, on_source, source_pause = queues[source]
    mover_before = source_pause + mover * _step(COSTS[tp], len(on_source), context)
    best, best_gain = None, -math.inf
    for worker, (tp, remaining, pause) in queues.items():
        if worker == source:
            continue
        cost = COSTS[tp]
        residents_before = 0.0
        if remaining:
            residents_before = pause + max(remaining) * _step(cost, len(remaining), context)
        before = max(mover_before, residents_before)
        moved = [*remaining, mover]
        step = _step(cost, len(moved), context)
        prefill = 0.0 if kv_transfer else cost.prefill_s(context)
        residents_after = pause + max(remaining) * step if remaining else 0.0
        after = max(residents_after, pause + mover * step + prefill)
        if before > 0 and after < before * (1 - margin) and 1 - after / before > best_gain:
            best, best_gain = worker, 1 - after / before
    return best


@settings(max_examples=200)
@given(
    workers=st.lists(
        st.tuples(
            st.sampled_from([1, 2, 4]),
            st.lists(st.floats(0, 20_000, allow_nan=False), min_size=0, max_size=12),
            st.sampled_from([0.0, 0.0, 3.3, 60.0]),
        ),
        min_size=2,
        max_size=6,
    ),
    mover=st.floats(0, 20_000, allow_nan=False),
    context=st.integers(1, 40_000),
    kv_transfer=st.booleans(),
    margin=st.sampled_from([0.0, 0.1, 0.3]),
)
def test_the_target_matches_a_brute_force(
    workers: list[tuple[int, list[float], float]],
    mover: float,
    context: int,
    kv_transfer: bool,
    margin: float,
) -> None:
    queues = {
        f"w{i}": (tp, list(remaining), pause) for i, (tp, remaining, pause) in enumerate(workers)
    }
    queues["w0"][1].append(mover)  # the mover sits on w0

    def queue(worker: str) -> WorkerQueue:
        tp, remaining, pause = queues[worker]
        return WorkerQueue(worker, COSTS[tp], len(remaining), max(remaining, default=0.0), pause)

    others = [queue(w) for w in queues if w != "w0"]
    got = rebalance_target(
        mover, queue("w0"), others, context_tokens=context, kv_transfer=kv_transfer, margin=margin
    )
    assert got == brute_target(mover, queues, "w0", context, kv_transfer, margin)


def test_bad_margins_and_an_empty_source_are_refused() -> None:
    source = WorkerQueue("a", COSTS[1], 1, 10.0)
    with pytest.raises(ValueError, match="margin"):
        rebalance_target(10.0, source, [], context_tokens=1, kv_transfer=True, margin=1.0)
    with pytest.raises(ValueError, match="no trajectory"):
        rebalance_target(
            10.0, WorkerQueue("a", COSTS[1], 0, 0.0), [], context_tokens=1, kv_transfer=True
        )


def _placer() -> PresortedPlacer:
    placer = PresortedPlacer(COSTS.__getitem__, kv_transfer=False)
    requests = [PlacementRequest(f"t{i}", 1000.0, 500) for i in range(40)]
    placer.place(requests, [WorkerInfo("a", 1), WorkerInfo("b", 1)])
    return placer


def test_a_long_trajectory_in_a_crowded_batch_moves_to_the_emptier_worker() -> None:
    placer = _placer()
    worker_of: dict[str, str] = cast(tuple, placer.snapshot())[0]
    on_a = [t for t, w in worker_of.items() if w == "a"]
    for traj_id in on_a[1:]:
        placer.on_finished(traj_id)  # a keeps one; b keeps its twenty
    straggler = next(t for t, w in worker_of.items() if w == "b")
    # Its predicted length (the rank planner's input) is unchanged; its remaining output grew.
    request = placer.on_prediction(
        straggler, 1000.0, remaining_tokens=29_000.0, context_tokens=2_000
    )
    assert request is not None and (request.source_id, request.target_id) == ("b", "a")


def test_no_move_targets_a_failed_worker() -> None:
    placer = _placer()
    worker_of: dict[str, str] = cast(tuple, placer.snapshot())[0]
    for traj_id in [t for t, w in worker_of.items() if w == "a"]:
        placer.on_finished(traj_id)
    placer.on_worker_failed("a")
    straggler = next(t for t, w in worker_of.items() if w == "b")
    request = placer.on_prediction(
        straggler, 1000.0, remaining_tokens=29_000.0, context_tokens=2_000
    )
    assert request is None or request.target_id != "a"
