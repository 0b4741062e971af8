"""RouterPlacer hands routers the request's group, prompt and context, and routes each first
request when the trajectory starts, at the loads of that moment."""

from __future__ import annotations

import random
from collections.abc import Sequence

from heddle.control.placement import PlacementRequest, RouterPlacer, WorkerInfo
from heddle.policy.placement.routing import RouteRequest, make_router

WORKERS = [WorkerInfo("w0"), WorkerInfo("w1"), WorkerInfo("w2")]


def start_all(placer: RouterPlacer, requests: Sequence[PlacementRequest]) -> list[str]:
    """Every trajectory started at once, in order: each first request sees the ones before."""
    assert placer.place(requests, WORKERS) == []  # nothing is routed before it starts
    loads = {worker.worker_id: 0 for worker in WORKERS}
    workers = []
    for request in requests:
        worker_id = placer.route_first(request.traj_id, loads)
        loads[worker_id] += 1
        workers.append(worker_id)
    return workers


def test_cache_aware_keeps_a_group_on_its_prompts_worker() -> None:
    placer = RouterPlacer("cache_aware", random.Random(0))
    requests = [
        PlacementRequest(f"t{i}", prompt_tokens=500, group_id=f"g{i // 4}") for i in range(8)
    ]
    # Group g0 follows its first member to w0; g1's first prompt matches nothing, so the
    # least-loaded worker (w1) takes it and the rest of g1 follows.
    assert start_all(placer, requests) == ["w0"] * 4 + ["w1"] * 4


def test_without_group_ids_every_trajectory_is_its_own_group() -> None:
    placer = RouterPlacer("cache_aware", random.Random(0))
    requests = [PlacementRequest(f"t{i}", prompt_tokens=500) for i in range(3)]
    assert start_all(placer, requests) == ["w0", "w1", "w2"]


def test_a_trajectory_that_starts_late_is_routed_at_the_loads_then() -> None:
    """A sample a concurrency cap held back goes where the router sends it when it starts:
    verl's sticky router gives a new session the least-requested worker of that moment."""
    placer = RouterPlacer("cache_affinity", random.Random(0))
    placer.place([PlacementRequest(f"t{i}", prompt_tokens=100) for i in range(2)], WORKERS)
    first = placer.route_first("t0", {"w0": 0, "w1": 0, "w2": 0})
    busy = dict.fromkeys(("w0", "w1", "w2"), 5)
    busy["w2"] = 1
    assert placer.route_first("t1", busy) == "w2"
    assert placer.route("t0", first, 300, busy) == first  # sticky afterwards


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
