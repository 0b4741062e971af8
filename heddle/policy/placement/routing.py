"""Placement baselines: how the anchor frameworks route each generation request to a worker.

Every router answers ``route(request, loads) -> worker index`` for each step's request (the
request as ``heddle.policy.placement.route_types.RouteRequest`` describes it), where ``loads[i]`` is
worker ``i``'s current load (in-flight requests, as the anchors count it; ``inf``: the worker is
down), and forgets a finished trajectory on ``release``. Routers are built from the workers' names
(hash rings place workers by name). Randomness comes from an injected ``random.Random``. Names
(``ROUTERS``) feed the CLI's ``--placement`` choices.

* ``least_load``: every request to the least-loaded worker, re-balanced at every step with no
  memory of where the trajectory ran before (slime's own router: ``THUDM/slime``
  ``slime/router/router.py``, ``SlimeRouter._use_url`` picks the worker with the fewest in-flight
  requests; ties go to the first registered worker, as ``min`` over its dict does).
* ``cache_aware``: the SGLang router's default policy, which slime launches by default
  (``heddle.policy.placement.cache_aware``): load balancing when imbalanced, else the worker whose
  requests created the longest matching prefix of the request's text.
* ``cache_affinity``: sticky sessions: a trajectory's first request picks the least-loaded
  worker and every later step returns there for its prefix cache (``volcengine/verl``
  ``verl/experimental/agent_loop/agent_loop.py``, ``AsyncLLMServerManager._choose_server``: an
  LRU map from request id to server, new ids to the head of a least-requests heap over servers
  shuffled at start, so ties fall randomly; rLLM's router does the same with in-flight counts).
* ``consistent_hash``: the trajectory id hashed to a worker; loads are ignored, so a saturated
  worker keeps its sessions (prime-rl #3255). This is slime's multi-turn
  advice (``docs/en/advanced/sglang-config.md``: ``--router-policy consistent_hashing``, with
  ``X-SMG-Routing-Key: sample.session_id``, one UUID per sample). The SGLang gateway
  (``sglang-router`` 0.3.2, ``smg`` ``src/policies/consistent_hashing.rs``) hashes the key with
  BLAKE3 (first 8 bytes, little-endian); in its regular HTTP mode, which slime runs, the router
  looks its hash ring up under the model id ``unknown`` and finds none, so the worker is
  ``live[hash % len(live)]`` over its worker list (checked against the real router:
  ``tests/policy/test_router_agreement.py``); a worker lost remaps most sessions. ``ring=True``
  models the ring it uses when a model id is given (``--enable-igw``; from the code only):
  150 points per worker at ``blake3("{url}#{i}")``, the first live point at or after the key.
* ``round_robin``: the gateway's ``round_robin`` policy: a request counter modulo the live
  workers (``smg`` ``src/policies/round_robin.rs``).
* ``random``: a uniformly random worker for every request (the gateway's ``random`` policy).
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Callable, Sequence
from functools import lru_cache

from blake3 import blake3

from heddle.policy.placement.cache_aware import CacheAwareRouter
from heddle.policy.placement.route_types import (
    Router,
    RouteRequest,
    check_loads,
    check_worker_names,
    first_least_loaded,
    live_indices,
)

__all__ = ["ROUTERS", "RouteRequest", "Router", "make_router", "worker_names_for"]


def blake3_u64_le(text: str) -> int:
    """The first 8 bytes of the BLAKE3 hash of ``text`` (UTF-8), little-endian: the key and
    ring hash of sglang-router's consistent hashing."""
    return int.from_bytes(blake3(text.encode()).digest()[:8], "little")


class LeastLoadRouter:
    name = "least_load"

    def __init__(self, worker_names: Sequence[str], rng: random.Random) -> None:
        check_worker_names(worker_names)
        self._num_workers = len(worker_names)

    def route(self, request: RouteRequest, loads: Sequence[float]) -> int:
        check_loads(loads, self._num_workers)
        return first_least_loaded(loads)

    def release(self, traj_id: str) -> None:
        return None


class CacheAffinityRouter:
    name = "cache_affinity"

    def __init__(self, worker_names: Sequence[str], rng: random.Random) -> None:
        check_worker_names(worker_names)
        self._num_workers = len(worker_names)
        self._rng = rng
        self._worker_of: dict[str, int] = {}

    def route(self, request: RouteRequest, loads: Sequence[float]) -> int:
        check_loads(loads, self._num_workers)
        worker = self._worker_of.get(request.traj_id)
        if worker is None:
            least = min(loads)
            worker = self._rng.choice([i for i, load in enumerate(loads) if load == least])
            self._worker_of[request.traj_id] = worker
        return worker

    def release(self, traj_id: str) -> None:
        self._worker_of.pop(traj_id, None)


NUM_VIRTUAL_NODES = 150
"""Ring points per worker (``VIRTUAL_NODES_PER_WORKER`` in the gateway)."""


@lru_cache(maxsize=64)
def _ring(worker_names: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    # Cached: the ring depends only on the names, and each point costs a pure-Python hash.
    points = sorted(
        (blake3_u64_le(f"{name}#{vnode}"), worker)
        for worker, name in enumerate(worker_names)
        for vnode in range(NUM_VIRTUAL_NODES)
    )
    return tuple(point for point, _ in points), tuple(worker for _, worker in points)


class ConsistentHashRouter:
    name = "consistent_hash"

    def __init__(
        self, worker_names: Sequence[str], rng: random.Random, *, ring: bool = False
    ) -> None:
        """``worker_names``: what the ring hashes (the gateway hashes the worker URLs);
        ``ring``: the gateway's hash ring instead of its regular mode's hash modulo."""
        check_worker_names(worker_names)
        self._num_workers = len(worker_names)
        self._ring = _ring(tuple(worker_names)) if ring else None
        self._hash_of: dict[str, int] = {}

    def route(self, request: RouteRequest, loads: Sequence[float]) -> int:
        check_loads(loads, self._num_workers)
        key_hash = self._hash_of.get(request.traj_id)
        if key_hash is None:
            key_hash = self._hash_of[request.traj_id] = blake3_u64_le(request.traj_id)
        live = live_indices(loads)
        if not live:
            raise ValueError("no live worker to route to")
        if self._ring is None:
            return live[key_hash % len(live)]
        points, owners = self._ring
        # The first point at or after the key (``partition_point(pos < key)``), clockwise.
        start = bisect_left(points, key_hash)
        alive = set(live)
        return next(
            owner
            for step in range(len(points))
            if (owner := owners[(start + step) % len(points)]) in alive
        )

    def release(self, traj_id: str) -> None:
        self._hash_of.pop(traj_id, None)


class RoundRobinRouter:
    name = "round_robin"

    def __init__(self, worker_names: Sequence[str], rng: random.Random) -> None:
        check_worker_names(worker_names)
        self._num_workers = len(worker_names)
        self._count = 0

    def route(self, request: RouteRequest, loads: Sequence[float]) -> int:
        check_loads(loads, self._num_workers)
        live = live_indices(loads)
        if not live:
            raise ValueError("no live worker to route to")
        worker = live[self._count % len(live)]
        self._count += 1
        return worker

    def release(self, traj_id: str) -> None:
        return None


class RandomRouter:
    name = "random"

    def __init__(self, worker_names: Sequence[str], rng: random.Random) -> None:
        check_worker_names(worker_names)
        self._num_workers = len(worker_names)
        self._rng = rng

    def route(self, request: RouteRequest, loads: Sequence[float]) -> int:
        check_loads(loads, self._num_workers)
        return self._rng.randrange(self._num_workers)

    def release(self, traj_id: str) -> None:
        return None


ROUTERS: dict[str, Callable[[Sequence[str], random.Random], Router]] = {
    "least_load": LeastLoadRouter,
    "cache_aware": CacheAwareRouter,
    "cache_affinity": CacheAffinityRouter,
    "consistent_hash": ConsistentHashRouter,
    "round_robin": RoundRobinRouter,
    "random": RandomRouter,
}
"""Baseline routers by name: ``ROUTERS[name](worker_names, rng)``."""


def worker_names_for(num_workers: int) -> list[str]:
    """Default names for numbered workers (``worker-0``, ...)."""
    return [f"worker-{i}" for i in range(num_workers)]


def make_router(
    name: str,
    num_workers: int,
    rng: random.Random,
    *,
    worker_names: Sequence[str] | None = None,
) -> Router:
    """The router ``name`` over ``num_workers`` workers, named ``worker_names`` (default
    ``worker-0``...; only hash rings depend on the names)."""
    factory = ROUTERS.get(name)
    if factory is None:
        raise ValueError(f"unknown router {name!r}; choose one of {sorted(ROUTERS)}")
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    names = list(worker_names) if worker_names is not None else worker_names_for(num_workers)
    if len(names) != num_workers:
        raise ValueError(f"{len(names)} worker names for {num_workers} workers")
    return factory(names, rng)
