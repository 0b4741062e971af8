"""RouterPlacer hands routers the request's group, prompt and context."""

from __future__ import annotations

import random

from heddle.control.placement import PlacementRequest, RouterPlacer, WorkerInfo
from heddle.policy.placement.routing import RouteRequest, make_router

WORKERS = [WorkerInfo("w0"), WorkerInfo("w1"), WorkerInfo("w2")]


def test_cache_aware_keeps_a_group_on_its_prompts_worker() -> None:
    placer = RouterPlacer("cache_aware", random.Random(0))
    requests = [
        PlacementRequest(f"t{i}", prompt_tokens=500, group_id=f"g{i // 4}") for i in range(8)
    ]
    assignments = placer.place(requests, WORKERS)
    by_group = {a.traj_id: a.worker_id for a in assignments}
    # Group g0 follows its first member to w0; g1's first prompt matches nothing, so the
    # least-loaded worker (w1) takes it and the rest of g1 follows.
    assert [by_group[f"t{i}"] for i in range(8)] == ["w0"] * 4 + ["w1"] * 4


def test_without_group_ids_every_trajectory_is_its_own_group() -> None:
    placer = RouterPlacer("cache_aware", random.Random(0))
    requests = [PlacementRequest(f"t{i}", prompt_tokens=500) for i in range(3)]
    assert [a.worker_id for a in placer.place(requests, WORKERS)] == ["w0", "w1", "w2"]


def test_later_steps_route_on_the_trajectorys_context() -> None:
    placer = RouterPlacer("cache_aware", random.Random(0))
    placer.place([PlacementRequest("t0", prompt_tokens=100, group_id="g")], WORKERS)
    # 100 / 400 <= 0.3: the low match goes to the least-loaded worker.
    assert placer.route("t0", "w0", 400, {"w0": 3, "w1": 0, "w2": 1}) == "w1"
    # Its 400 tokens now live on w1: the next turn returns there.
    assert placer.route("t0", "w1", 450, {"w0": 0, "w1": 2, "w2": 0}) == "w1"


def test_consistent_hash_rings_on_the_worker_ids() -> None:
    placer = RouterPlacer("consistent_hash", random.Random(0))
    placer.place([PlacementRequest("t0")], WORKERS)
    ring = make_router("consistent_hash", 3, random.Random(0), worker_names=["w0", "w1", "w2"])
    expected = ["w0", "w1", "w2"][ring.route(RouteRequest("t0"), [0.0] * 3)]
    assert placer.route("t0", "w0", 10, {"w0": 0, "w1": 0, "w2": 0}) == expected
