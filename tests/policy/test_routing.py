"""Baseline routers: each behaves as its anchor does."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.placement.routing import (
    NUM_VIRTUAL_NODES,
    ROUTERS,
    ConsistentHashRouter,
    RouteRequest,
    blake3_u64_le,
    make_router,
)

INF = float("inf")


def req(traj_id: str) -> RouteRequest:
    return RouteRequest(traj_id)


def test_least_load_rebalances_every_step() -> None:
    router = make_router("least_load", 3, random.Random(0))
    assert router.route(req("t1"), [2.0, 0.0, 1.0]) == 1
    assert router.route(req("t1"), [0.0, 5.0, 1.0]) == 0  # no memory of the previous step
    assert router.route(req("t2"), [1.0, 1.0, 1.0]) == 0  # ties: first worker
    assert router.route(req("t2"), [INF, 1.0, 1.0]) == 1  # a down worker is never picked


def test_cache_affinity_is_sticky_and_balances_new_sessions() -> None:
    router = make_router("cache_affinity", 3, random.Random(0))
    first = router.route(req("t1"), [3.0, 0.0, 3.0])
    assert first == 1
    assert router.route(req("t1"), [0.0, 9.0, 0.0]) == 1  # sticks even when its worker is busy
    router.release("t1")
    assert router.route(req("t1"), [0.0, 9.0, 0.0]) in (0, 2)


def test_consistent_hash_is_stable_and_spreads_sessions() -> None:
    router = make_router("consistent_hash", 4, random.Random(0))
    again = make_router("consistent_hash", 4, random.Random(99))
    loads = [0.0] * 4
    routes = [router.route(req(f"t{i}"), loads) for i in range(2000)]
    assert routes == [again.route(req(f"t{i}"), [9.0] * 4) for i in range(2000)]
    counts = Counter(routes)
    assert len(counts) == 4 and min(counts.values()) > 300


def _ring_reference(names: list[str], key: str, live: set[int]) -> int:
    """Brute force: the live worker owning the first point at or after the key, clockwise."""
    points = sorted(
        (blake3_u64_le(f"{name}#{v}"), w)
        for w, name in enumerate(names)
        for v in range(NUM_VIRTUAL_NODES)
    )
    position = blake3_u64_le(key)
    after = [w for p, w in points if p >= position and w in live]
    return after[0] if after else next(w for _, w in points if w in live)


@settings(max_examples=30)
@given(
    num_workers=st.integers(1, 4),
    keys=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=8),
    down=st.integers(0, 3),
)
def test_consistent_hash_matches_a_brute_force_ring(
    num_workers: int, keys: list[str], down: int
) -> None:
    names = [f"http://127.0.0.1:{9000 + i}" for i in range(num_workers)]
    router = ConsistentHashRouter(names, random.Random(0), ring=True)
    loads = [0.0] * num_workers
    if num_workers > 1:
        loads[down % num_workers] = INF
    live = {i for i, load in enumerate(loads) if load != INF}
    for key in keys:
        assert router.route(req(key), loads) == _ring_reference(names, key, live)


def test_consistent_hash_is_the_key_hash_modulo_the_live_workers() -> None:
    router = make_router("consistent_hash", 4, random.Random(0))
    for key in ("a", "session-1", "4b1f0c3e-uuid"):
        assert router.route(req(key), [5.0, 0.0, 9.0, 1.0]) == blake3_u64_le(key) % 4
        live = [0, 2, 3]
        assert router.route(req(key), [0.0, INF, 0.0, 0.0]) == live[blake3_u64_le(key) % 3]


def test_the_ring_moves_only_a_down_workers_sessions() -> None:
    router = ConsistentHashRouter([f"worker-{i}" for i in range(4)], random.Random(0), ring=True)
    before = [router.route(req(f"t{i}"), [0.0] * 4) for i in range(400)]
    after = [router.route(req(f"t{i}"), [0.0, INF, 0.0, 0.0]) for i in range(400)]
    assert all(a == b for a, b in zip(before, after, strict=True) if a != 1)
    assert 1 not in after


def test_round_robin_cycles_over_live_workers() -> None:
    router = make_router("round_robin", 3, random.Random(0))
    assert [router.route(req("t"), [0.0] * 3) for _ in range(4)] == [0, 1, 2, 0]
    assert router.route(req("t"), [0.0, INF, 0.0]) == 0  # count 4 over live [0, 2]
    assert router.route(req("t"), [0.0, INF, 0.0]) == 2


def test_random_router_is_reproducible_with_a_seed() -> None:
    a = make_router("random", 5, random.Random(7))
    b = make_router("random", 5, random.Random(7))
    loads = [0.0] * 5
    assert [a.route(req("t"), loads) for _ in range(50)] == [
        b.route(req("t"), loads) for _ in range(50)
    ]


@settings(max_examples=50)
@given(
    name=st.sampled_from(sorted(ROUTERS)),
    loads=st.lists(st.integers(0, 5).map(float), min_size=1, max_size=6),
    seed=st.integers(0, 100),
)
def test_every_router_returns_a_valid_worker(name: str, loads: list[float], seed: int) -> None:
    router = make_router(name, len(loads), random.Random(seed))
    for i in range(10):
        request = RouteRequest(f"t{i}", f"g{i % 3}", 10, 10 + i)
        assert 0 <= router.route(request, loads) < len(loads)
    assert router.name == name


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        make_router("sticky", 2, random.Random(0))
    with pytest.raises(ValueError, match="num_workers"):
        make_router("random", 0, random.Random(0))
    with pytest.raises(ValueError, match="entries"):
        make_router("least_load", 2, random.Random(0)).route(req("t"), [1.0])
    with pytest.raises(ValueError, match="distinct"):
        make_router("random", 2, random.Random(0), worker_names=["a", "a"])
    with pytest.raises(ValueError, match="common prefix"):
        RouteRequest("t", "g", 5, 9, 6)
