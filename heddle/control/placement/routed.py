"""``RouterPlacer`` (the baselines): every step's request goes where a
``heddle.policy.placement.routing`` router sends it, given the workers' in-flight requests. The
first step's request is routed when the trajectory starts (``route_first``), as a baseline sends
it when its rollout code lets the sample run (at once, or when a concurrency cap has room), so
the router sees the loads of that moment.

Sticky routers (cache affinity, consistent hashing) return the same worker; re-balancing routers
(least load, random) may not, and the trajectory then re-prefills on the new worker. With a
``locality_threshold_tokens``, a trajectory whose context has reached the threshold stays where
its KV is and only shorter ones are balanced (Autellix's locality-aware load balancing). Each
request reaches the router as a ``RouteRequest``: the trajectory, its group (GRPO members share
the prompt), its prompt and its context so far, which is what the text-matching ``cache_aware``
router needs; the workers' ids name them on hash rings.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from heddle.control.placement.placer import Assignment, PlacementRequest, WorkerInfo
from heddle.policy.migration.planner import MigrationRequest
from heddle.policy.placement.routing import RouteRequest, make_router


class RouterPlacer:
    """A baseline router deciding every step (see the module docstring)."""

    needs_predictions = False

    def __init__(
        self,
        router: str,
        rng: random.Random,
        *,
        locality_threshold_tokens: int | None = None,
        common_prefix_tokens: int = 0,
    ) -> None:
        """``common_prefix_tokens``: the prefix every prompt of the rollout shares (chat
        template, system prompt), which text-matching routers match across groups."""
        self._router_name = router
        self._rng = rng
        self._locality_threshold_tokens = locality_threshold_tokens
        self._common_prefix_tokens = common_prefix_tokens
        self._worker_ids: list[str] = []
        self._prompt_of: dict[str, tuple[str, int]] = {}
        self._router = make_router(router, 1, rng)

    def place(
        self, trajectories: Sequence[PlacementRequest], workers: Sequence[WorkerInfo]
    ) -> list[Assignment]:
        """Learn the rollout's workers and prompts; nothing is assigned before it starts."""
        self._worker_ids = [worker.worker_id for worker in workers]
        self._router = make_router(
            self._router_name, len(workers), self._rng, worker_names=self._worker_ids
        )
        self._prompt_of = {t.traj_id: (t.group_id, t.prompt_tokens) for t in trajectories}
        return []

    def route_first(self, traj_id: str, loads: Mapping[str, int]) -> str:
        # The first step's request is the prompt alone.
        _, prompt_tokens = self._prompt_of.get(traj_id, ("", 0))
        return self._route(traj_id, prompt_tokens, loads)

    def route(
        self, traj_id: str, current_worker_id: str, context_tokens: int, loads: Mapping[str, int]
    ) -> str:
        threshold = self._locality_threshold_tokens
        if threshold is not None and context_tokens >= threshold and current_worker_id in loads:
            return current_worker_id
        worker_id = self._route(traj_id, context_tokens, loads)
        # A router that names a failed worker keeps the trajectory where the control plane
        # re-placed it.
        return worker_id if worker_id in loads else current_worker_id

    def _route(self, traj_id: str, context_tokens: int, loads: Mapping[str, int]) -> str:
        # Failed workers look infinitely loaded: routers treat them as down.
        vector = [float(loads.get(worker_id, float("inf"))) for worker_id in self._worker_ids]
        group_id, prompt_tokens = self._prompt_of.get(traj_id, ("", 0))
        request = RouteRequest(
            traj_id,
            group_id,
            prompt_tokens,
            max(context_tokens, prompt_tokens),
            min(self._common_prefix_tokens, prompt_tokens),
        )
        return self._worker_ids[self._router.route(request, vector)]

    def on_prediction(
        self,
        traj_id: str,
        predicted: float,
        *,
        remaining_tokens: float = 0.0,
        context_tokens: int = 0,
        kv_is_stale: bool = False,
        pauses: Mapping[str, float] | None = None,
    ) -> MigrationRequest | None:
        return None

    def token_equivalents(self, tool_s: float) -> float:
        return 0.0

    def on_moved(self, traj_id: str, worker_id: str) -> None:
        return None

    def on_finished(self, traj_id: str) -> None:
        self._router.release(traj_id)
        self._prompt_of.pop(traj_id, None)

    def on_worker_failed(self, worker_id: str) -> None:
        return None

    def on_worker_resized(self, worker_id: str, tp_degree: int) -> None:
        return None

    def snapshot(self) -> object:
        return list(self._worker_ids), self._router_name
