"""The SGLang router's ``cache_aware`` policy (slime's default router), modelled exactly.

Source: ``sglang-router`` 0.3.2 on PyPI, the SGLang Model Gateway (crate ``smg``) at its release
commit (``smg-project/smg`` c7f9bf9f5, "[smg] release 0.3.2"): ``src/policies/cache_aware.rs``
(``CacheAwarePolicy::select_worker``) and ``src/policies/tree.rs`` (the approximate radix tree).
Per request, over the live workers:

1. Load imbalance first: with ``loads`` the in-flight requests the router counts (a guard per
   proxied request, ``WorkerLoadGuard``), if ``max - min > balance_abs_threshold`` and
   ``max > min * balance_rel_threshold`` the request goes to the least-loaded worker.
2. Otherwise the request's text is matched against one radix tree shared by all workers; each
   tree node remembers the worker whose request created it (``last_tenant``), and the match
   names the creator of the node where the match ends, i.e. of its last matched character. If
   ``matched / len(text) > cache_threshold`` the request goes there, else to the least-loaded
   worker. (0.3.2 sends a low match to the least-loaded worker; the "smallest tree" rule of the
   file's header comment is gone from the code.)
3. Either way the request's text is inserted for the chosen worker. Ties on load go to the
   first worker in the router's list (``min_by_key``); that order is the worker registry's map
   order, fixed for a router process, so worker indices here are that order.

The text model (``heddle.policy.placement.route_types``) makes the tree three levels of spans: the
common prefix, each group's prompt, each trajectory's own turns. Each span records which worker
created each stretch of it (the first insert reaching that far), which is all the tree's answers
depend on. Eviction is not modelled: the router trims a worker's tree to ``max_tree_size`` (2**26
characters) every 60 s by least-recent leaves; with ``input_ids`` sent as space-joined decimal ids
(about 6 characters a token) that is about 11M tokens per worker, above one rollout's distinct text
per worker at Heddle's sizes, and leaves from finished rollouts, never matched again, go first.
Defaults are the router's (``router_args.py``: 0.3, 64, 1.5).
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from heddle.policy.placement.route_types import (
    RouteRequest,
    check_loads,
    check_worker_names,
    first_least_loaded,
    live_indices,
)


@dataclass(slots=True)
class _Span:
    """One span of text: ``ends[k]`` is where the stretch created by ``creators[k]`` ends."""

    ends: list[int] = field(default_factory=list)
    creators: list[int] = field(default_factory=list)

    @property
    def covered(self) -> int:
        return self.ends[-1] if self.ends else 0

    def extend(self, length: int, worker: int) -> None:
        if length > self.covered:
            self.ends.append(length)
            self.creators.append(worker)

    def creator_at(self, position: int) -> int:
        return self.creators[bisect_right(self.ends, position)]

    def forget(self, worker: int) -> None:
        """Cut the span where ``worker``'s first stretch starts (the worker is gone)."""
        if worker in self.creators:
            cut = self.creators.index(worker)
            del self.ends[cut:], self.creators[cut:]


class PrefixModel:
    """The router's radix tree under the text model: the longest match and its creator."""

    def __init__(self) -> None:
        self._common = _Span()
        self._groups: dict[str, _Span] = {}
        self._own: dict[str, _Span] = {}

    def _spans(self, request: RouteRequest) -> list[tuple[_Span | None, int]]:
        common = request.num_common_prefix_tokens
        prompt = request.num_prompt_tokens
        return [
            (self._common, common),
            (self._groups.get(request.group_key), prompt - common),
            (self._own.get(request.traj_id), request.num_text_tokens - prompt),
        ]

    def match(self, request: RouteRequest) -> tuple[int, int | None]:
        """(matched tokens, the worker that created the last matched one; None if nothing)."""
        matched, creator = 0, None
        for span, length in self._spans(request):
            if length == 0:
                continue  # an empty span: the text goes straight on to the next
            covered = min(length, span.covered) if span is not None else 0
            if covered > 0:
                assert span is not None
                matched += covered
                creator = span.creator_at(covered - 1)
            if covered < length:
                break
        return matched, creator

    def insert(self, request: RouteRequest, worker: int) -> None:
        common = request.num_common_prefix_tokens
        prompt = request.num_prompt_tokens
        self._common.extend(common, worker)
        if prompt > common:
            self._groups.setdefault(request.group_key, _Span()).extend(prompt - common, worker)
        if request.num_text_tokens > prompt:
            own = self._own.setdefault(request.traj_id, _Span())
            own.extend(request.num_text_tokens - prompt, worker)

    def forget_worker(self, worker: int) -> None:
        for span in (self._common, *self._groups.values(), *self._own.values()):
            span.forget(worker)

    def release(self, traj_id: str) -> None:
        # Its text can never be matched again (no later request extends it): forgetting it
        # changes no answer.
        self._own.pop(traj_id, None)


CacheAwarePath = Literal["load_balance", "prefix_match", "low_match", "stale_match"]


@dataclass(frozen=True, slots=True)
class CacheAwareDecision:
    """Where a request goes and why (``stale_match``: the matched worker is down)."""

    worker: int
    path: CacheAwarePath
    match_rate: float


class CacheAwareRouter:
    name = "cache_aware"

    def __init__(
        self,
        worker_names: Sequence[str],
        rng: random.Random,
        *,
        cache_threshold: float = 0.3,
        balance_abs_threshold: float = 64,
        balance_rel_threshold: float = 1.5,
    ) -> None:
        check_worker_names(worker_names)
        self._num_workers = len(worker_names)
        self._cache_threshold = cache_threshold
        self._balance_abs_threshold = balance_abs_threshold
        self._balance_rel_threshold = balance_rel_threshold
        self._tree = PrefixModel()

    def is_imbalanced(self, live_loads: Sequence[float]) -> bool:
        low, high = min(live_loads), max(live_loads)
        return high - low > self._balance_abs_threshold and high > low * self._balance_rel_threshold

    def decide(self, request: RouteRequest, loads: Sequence[float]) -> CacheAwareDecision:
        """The router's pick for ``request`` at ``loads``, changing nothing (see ``record``)."""
        check_loads(loads, self._num_workers)
        live = live_indices(loads)
        if not live:
            raise ValueError("no live worker to route to")
        live_loads = [loads[i] for i in live]
        least = live[first_least_loaded(live_loads)]
        matched, creator = self._tree.match(request)
        length = request.num_text_tokens
        rate = matched / length if length > 0 else 0.0
        if self.is_imbalanced(live_loads):
            return CacheAwareDecision(least, "load_balance", rate)
        if rate <= self._cache_threshold or creator is None:
            return CacheAwareDecision(least, "low_match", rate)
        if creator in live:
            return CacheAwareDecision(creator, "prefix_match", rate)
        # The matched worker is gone: the router answers its first healthy worker.
        return CacheAwareDecision(live[0], "stale_match", rate)

    def record(self, request: RouteRequest, decision: CacheAwareDecision) -> None:
        """What the router's tree does with a routed request: insert its text for the worker;
        after a stale match, drop the gone worker instead (the router removes it from its tree
        and inserts nothing; an approximation: the real tree keeps nodes others also hold)."""
        if decision.path == "stale_match":
            _, creator = self._tree.match(request)
            if creator is not None:
                self._tree.forget_worker(creator)
            return
        self._tree.insert(request, decision.worker)

    def route(self, request: RouteRequest, loads: Sequence[float]) -> int:
        decision = self.decide(request, loads)
        self.record(request, decision)
        return decision.worker

    def release(self, traj_id: str) -> None:
        self._tree.release(traj_id)
