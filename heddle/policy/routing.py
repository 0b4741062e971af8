"""Placement baselines: how the anchor frameworks route each generation request to a worker.

Every router answers ``route(traj_id, loads) -> worker index`` for each step's request, where
``loads[i]`` is worker ``i``'s current load (in-flight requests, as the anchors count it), and
forgets a finished trajectory on ``release``. Randomness comes from an injected
``random.Random``. Names (``ROUTERS``) feed the CLI's ``--placement`` choices.

* ``least_load``: every request to the least-loaded worker, re-balanced at every step with no
  memory of where the trajectory ran before (slime's own router: ``THUDM/slime``
  ``slime/router/router.py``, ``SlimeRouter._use_url`` picks the worker with the fewest in-flight
  requests; ties go to the first registered worker, as ``min`` over its dict does).
* ``cache_affinity``: sticky sessions: a trajectory's first request picks the least-loaded
  worker and every later step returns there for its prefix cache (``volcengine/verl``
  ``verl/experimental/agent_loop/agent_loop.py``, ``AsyncLLMServerManager._choose_server``: an
  LRU map from request id to server, new ids to the head of a least-requests heap over servers
  shuffled at start, so ties fall randomly; rLLM's router does the same with in-flight counts).
* ``consistent_hash``: the trajectory id hashed onto a ring of worker points, clockwise to the
  next point (slime with the SGLang router/gateway: ``sgl-project/sglang``
  ``sgl-model-gateway/src/policies/consistent_hashing.rs``, routing key -> hash ring). Loads are
  ignored: a saturated worker keeps its sessions (calibration.md s.5, prime-rl #3255).
* ``random``: a uniformly random worker for every request (the gateway's ``random`` policy).
"""

from __future__ import annotations

import hashlib
import random
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Protocol


class Router(Protocol):
    @property
    def name(self) -> str: ...

    def route(self, traj_id: str, loads: Sequence[float]) -> int:
        """The worker index for this step's request of ``traj_id``."""
        ...

    def release(self, traj_id: str) -> None:
        """The trajectory finished: forget it (sticky maps would otherwise grow forever)."""
        ...


def _check_loads(loads: Sequence[float], num_workers: int) -> None:
    if len(loads) != num_workers:
        raise ValueError(f"loads has {len(loads)} entries for {num_workers} workers")


def _check_num_workers(num_workers: int) -> None:
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")


class LeastLoadRouter:
    name = "least_load"

    def __init__(self, num_workers: int, rng: random.Random) -> None:
        _check_num_workers(num_workers)
        self._num_workers = num_workers

    def route(self, traj_id: str, loads: Sequence[float]) -> int:
        _check_loads(loads, self._num_workers)
        return min(range(self._num_workers), key=loads.__getitem__)

    def release(self, traj_id: str) -> None:
        return None


class CacheAffinityRouter:
    name = "cache_affinity"

    def __init__(self, num_workers: int, rng: random.Random) -> None:
        _check_num_workers(num_workers)
        self._num_workers = num_workers
        self._rng = rng
        self._worker_of: dict[str, int] = {}

    def route(self, traj_id: str, loads: Sequence[float]) -> int:
        _check_loads(loads, self._num_workers)
        worker = self._worker_of.get(traj_id)
        if worker is None:
            least = min(loads)
            worker = self._rng.choice([i for i, load in enumerate(loads) if load == least])
            self._worker_of[traj_id] = worker
        return worker

    def release(self, traj_id: str) -> None:
        self._worker_of.pop(traj_id, None)


def _ring_hash(key: str) -> int:
    # A stable hash (Python's hash() is salted per process; routes must survive restarts).
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


class ConsistentHashRouter:
    name = "consistent_hash"

    def __init__(self, num_workers: int, rng: random.Random, num_virtual_nodes: int = 160) -> None:
        """``num_virtual_nodes`` points per worker even out the ring (160, as vLLM's router)."""
        _check_num_workers(num_workers)
        if num_virtual_nodes < 1:
            raise ValueError(f"num_virtual_nodes must be >= 1, got {num_virtual_nodes}")
        self._num_workers = num_workers
        points = sorted(
            (_ring_hash(f"worker-{worker}#{replica}"), worker)
            for worker in range(num_workers)
            for replica in range(num_virtual_nodes)
        )
        self._points = [point for point, _ in points]
        self._owners = [worker for _, worker in points]

    def route(self, traj_id: str, loads: Sequence[float]) -> int:
        _check_loads(loads, self._num_workers)
        index = bisect_right(self._points, _ring_hash(traj_id)) % len(self._points)
        return self._owners[index]

    def release(self, traj_id: str) -> None:
        return None


class RandomRouter:
    name = "random"

    def __init__(self, num_workers: int, rng: random.Random) -> None:
        _check_num_workers(num_workers)
        self._num_workers = num_workers
        self._rng = rng

    def route(self, traj_id: str, loads: Sequence[float]) -> int:
        _check_loads(loads, self._num_workers)
        return self._rng.randrange(self._num_workers)

    def release(self, traj_id: str) -> None:
        return None


ROUTERS: dict[str, Callable[[int, random.Random], Router]] = {
    "least_load": LeastLoadRouter,
    "cache_affinity": CacheAffinityRouter,
    "consistent_hash": ConsistentHashRouter,
    "random": RandomRouter,
}
"""Baseline routers by name: ``ROUTERS[name](num_workers, rng)``."""


def make_router(name: str, num_workers: int, rng: random.Random) -> Router:
    factory = ROUTERS.get(name)
    if factory is None:
        raise ValueError(f"unknown router {name!r}; choose one of {sorted(ROUTERS)}")
    return factory(num_workers, rng)
