"""The incremental migration planner against a brute-force re-sort."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.cost.model import preset
from heddle.policy.migration.planner import (
    MigrationPlanner,
    WorkerShare,
    estimate_move,
    shares_from_partition,
)
from heddle.policy.placement.presorted import partition


def brute_rank(predicted: dict[str, float], traj_id: str) -> int:
    return sorted(predicted, key=lambda t: (-predicted[t], t)).index(traj_id)


def brute_target(shares: list[WorkerShare], num_active: int, rank: int) -> str:
    total = sum(s.num_ranks for s in shares)
    scaled = (rank + 0.5) * total / num_active
    end = 0.0
    for share in shares:
        end += share.num_ranks
        if share.num_ranks > 0 and scaled < end:
            return share.worker_id
    return [s for s in shares if s.num_ranks > 0][-1].worker_id


def holds_rank(shares: list[WorkerShare], worker_id: str, position: float) -> bool:
    """Whether ``worker_id``'s run of the original partition contains ``position``."""
    start = 0.0
    for share in shares:
        if share.worker_id == worker_id:
            return start <= position < start + share.num_ranks
        start += share.num_ranks
    return False


OPS = st.lists(
    st.tuples(st.sampled_from(["add", "update", "remove"]), st.integers(0, 15), st.integers(0, 50)),
    max_size=80,
)


@settings(max_examples=150)
@given(ops=OPS, sizes=st.lists(st.integers(0, 5), min_size=1, max_size=5).filter(any))
def test_planner_matches_brute_force_without_hysteresis(
    ops: list[tuple[str, int, int]], sizes: list[int]
) -> None:
    shares = [WorkerShare(f"w{i}", float(c)) for i, c in enumerate(sizes)]
    planner = MigrationPlanner(shares, hysteresis=0.0)
    predicted: dict[str, float] = {}
    worker: dict[str, str] = {}
    for op, key, value in ops:
        traj_id = f"t{key:02d}"
        if op == "add" and traj_id not in predicted:
            planner.add(traj_id, "w0", float(value))
            predicted[traj_id], worker[traj_id] = float(value), "w0"
        elif op == "update" and traj_id in predicted:
            predicted[traj_id] = float(value)
            request = planner.update(traj_id, float(value))
            rank = brute_rank(predicted, traj_id)
            target = brute_target(shares, len(predicted), rank)
            if target == worker[traj_id]:
                assert request is None
            else:
                assert request is not None and request.target_id == target
                assert request.by_rescaling == holds_rank(shares, worker[traj_id], rank + 0.5)
                assert request.source_id == worker[traj_id]
                planner.moved(traj_id, target)
                worker[traj_id] = target
        elif op == "remove" and traj_id in predicted:
            planner.remove(traj_id)
            del predicted[traj_id], worker[traj_id]
        assert len(planner) == len(predicted)
        for t in predicted:
            assert planner.rank_of(t) == brute_rank(predicted, t)


def test_capacities_rescale_to_the_active_count() -> None:
    planner = MigrationPlanner([WorkerShare("a", 4), WorkerShare("b", 4)], hysteresis=0.0)
    for i, length in enumerate([90, 80, 70, 60]):
        planner.add(f"t{i}", "a" if i < 2 else "b", float(length))
    # Four of eight left: each worker's share is now two ranks.
    assert [planner.target_of_rank(r) for r in range(4)] == ["a", "a", "b", "b"]
    request = planner.update("t3", 100.0)
    assert request is not None and (request.source_id, request.target_id) == ("b", "a")
    assert request.rank == 0


def test_hysteresis_absorbs_a_wobble_at_a_boundary() -> None:
    shares = [WorkerShare("a", 10), WorkerShare("b", 10)]
    planner = MigrationPlanner(shares, hysteresis=0.25)
    for i in range(20):
        planner.add(f"t{i:02d}", "a" if i < 10 else "b", float(100 - i))
    assert planner.update("t10", 91.5) is None  # rank 10 -> 9: one rank across the boundary
    assert planner.rank_of("t10") == 9 and planner.target_of_rank(9) == "a"
    request = planner.update("t10", 200.0)  # rank 0: deep inside a's run
    assert request is not None and request.target_id == "a"


def test_shares_from_partition_orders_workers_by_their_longest() -> None:
    lengths = [5.0, 100.0, 6.0, 7.0]
    result = partition(lengths, 3, lambda size: 1.0 + 0.1 * size)
    shares = shares_from_partition(result, lengths, ["x", "y", "z"])
    assert shares[0].worker_id == "xyz"[result.worker_of()[1]] and shares[0].num_ranks == 1.0
    assert sum(s.num_ranks for s in shares) == 4.0


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="empty"):
        MigrationPlanner([])
    with pytest.raises(ValueError, match="sum to 0"):
        MigrationPlanner([WorkerShare("a", 0.0)])
    planner = MigrationPlanner([WorkerShare("a", 1.0)])
    planner.add("t", "a", 1.0)
    with pytest.raises(ValueError, match="already tracked"):
        planner.add("t", "a", 1.0)
    with pytest.raises(ValueError, match="not tracked"):
        planner.update("u", 1.0)
    with pytest.raises(ValueError, match="NaN"):
        planner.update("t", float("nan"))


@settings(max_examples=100)
@given(
    source_batch=st.integers(1, 256),
    target_batch=st.integers(0, 256),
    context=st.integers(0, 60_000),
    remaining=st.floats(0, 50_000),
    more=st.floats(0, 50_000),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_a_move_pays_more_the_longer_the_trajectory_still_runs(
    source_batch: int, target_batch: int, context: int, remaining: float, more: float, tp: int
) -> None:
    """Gain grows with the remaining tokens when the target is faster; a KV transfer costs the
    trajectory nothing, a re-prefill costs the target's prefill of its context."""
    source, target = preset("qwen3-8b", "h200", 1), preset("qwen3-8b", "h200", tp)
    kwargs = {"source_batch": source_batch, "target_batch": target_batch, "context_tokens": context}
    short = estimate_move(source, target, remaining_tokens=remaining, kv_transfer=False, **kwargs)
    long = estimate_move(
        source, target, remaining_tokens=remaining + more, kv_transfer=False, **kwargs
    )
    assert short.cost_s == long.cost_s == target.prefill_s(context)
    if short.pays:
        assert long.pays
    moved = estimate_move(source, target, remaining_tokens=remaining, kv_transfer=True, **kwargs)
    assert moved.cost_s == 0.0 and moved.gain_s == short.gain_s
    assert (
        estimate_move(source, target, remaining_tokens=0, kv_transfer=True, **kwargs).pays is False
    )
