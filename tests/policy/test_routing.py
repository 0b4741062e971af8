"""Baseline routers: each behaves as its anchor does."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.routing import ROUTERS, make_router


def test_least_load_rebalances_every_step() -> None:
    router = make_router("least_load", 3, random.Random(0))
    assert router.route("t1", [2.0, 0.0, 1.0]) == 1
    assert router.route("t1", [0.0, 5.0, 1.0]) == 0  # no memory of the previous step
    assert router.route("t2", [1.0, 1.0, 1.0]) == 0  # ties: first worker


def test_cache_affinity_is_sticky_and_balances_new_sessions() -> None:
    router = make_router("cache_affinity", 3, random.Random(0))
    first = router.route("t1", [3.0, 0.0, 3.0])
    assert first == 1
    assert router.route("t1", [0.0, 9.0, 0.0]) == 1  # sticks even when its worker is busy
    router.release("t1")
    assert router.route("t1", [0.0, 9.0, 0.0]) in (0, 2)


def test_consistent_hash_is_stable_and_spreads_sessions() -> None:
    router = make_router("consistent_hash", 4, random.Random(0))
    again = make_router("consistent_hash", 4, random.Random(99))
    loads = [0.0] * 4
    routes = [router.route(f"t{i}", loads) for i in range(2000)]
    assert routes == [again.route(f"t{i}", [9.0] * 4) for i in range(2000)]
    counts = Counter(routes)
    assert len(counts) == 4 and min(counts.values()) > 300


def test_random_router_is_reproducible_with_a_seed() -> None:
    a = make_router("random", 5, random.Random(7))
    b = make_router("random", 5, random.Random(7))
    loads = [0.0] * 5
    assert [a.route("t", loads) for _ in range(50)] == [b.route("t", loads) for _ in range(50)]


@settings(max_examples=50, deadline=None)
@given(
    name=st.sampled_from(sorted(ROUTERS)),
    loads=st.lists(st.integers(0, 5).map(float), min_size=1, max_size=6),
    seed=st.integers(0, 100),
)
def test_every_router_returns_a_valid_worker(name: str, loads: list[float], seed: int) -> None:
    router = make_router(name, len(loads), random.Random(seed))
    for i in range(10):
        assert 0 <= router.route(f"t{i}", loads) < len(loads)
    assert router.name == name


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        make_router("sticky", 2, random.Random(0))
    with pytest.raises(ValueError, match="num_workers"):
        make_router("random", 0, random.Random(0))
    with pytest.raises(ValueError, match="entries"):
        make_router("least_load", 2, random.Random(0)).route("t", [1.0])
