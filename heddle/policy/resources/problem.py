"""Trajectory-adaptive resource management (docs/paper.md, the paper's s.6): how many workers of
which TP degree.

A *configuration* is a multiset of TP degrees whose GPUs fit the budget; its objective is the
heterogeneous placement makespan of the predicted lengths on those workers
(``heddle.policy.placement.hetero``). This module prices configurations, builds plans, and
holds the baselines (Fix-1, Fix-8) and the exhaustive search; ``best_cover`` finds the optimum
over every configuration at once (``heddle.policy.resources.budget_search``), and
``heddle.policy.resources.plan_choice`` picks among such optima with a richer estimate.

From lengths to seconds on a TP-``p`` worker: a trajectory of ``L`` remaining output tokens in a
group of ``b`` costs ``T(p) * F_p(b) * L`` where, at a representative context ``c`` per
sequence (the caller's choice, e.g. prompt + half the mean output),

* ``T(p) = solo_token_s(c)``: one decode step alone on the worker (docs/calibration.md s.1);
* ``F_p(b) = interference(b, c)`` while ``b * c`` fits the KV capacity; past that cap the
  engine can only run ``cap`` sequences at once and the rest queue, so the group drains at the
  full batch's throughput: ``F_p(b) = F_p(cap) * b / cap`` (non-decreasing, continuous).

Prefill is left out of the objective: at docs/calibration.md's rates (~40k tokens/s at TP1 for
Qwen3-8B against ~100 tokens/s decode per sequence) re-prefilling a tool observation costs
under 1% of a trajectory's decode time, and it scales with TP like decode does, so it would not
change which configuration wins. The simulator charges it in full.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from heddle.policy.cost.model import CostModel
from heddle.policy.placement.blocks import BlockTable, check_lengths, cost_table, longest_first
from heddle.policy.placement.hetero import solve_typed
from heddle.policy.placement.worker_mix import TypedSplit
from heddle.policy.resources.budget_search import Cover, best_cover


@dataclass(frozen=True, slots=True)
class TpInterference:
    """``F_p(b)`` of one cost model at a representative context (module docstring)."""

    cost_model: CostModel
    context_tokens: int

    @property
    def max_batch(self) -> int:
        """Sequences of ``context_tokens`` that fit the KV capacity at once (>= 0)."""
        if self.context_tokens <= 0:
            return 1 << 62
        return self.cost_model.max_kv_tokens // self.context_tokens

    def __call__(self, batch_size: int) -> float:
        cap = self.max_batch
        if cap < 1:
            return math.inf
        if batch_size <= cap:
            return self.cost_model.interference(batch_size, self.context_tokens)
        return self.cost_model.interference(cap, self.context_tokens) * batch_size / cap


@dataclass(frozen=True, slots=True)
class ResourcePlan:
    """TP degree per worker (largest first), trajectory indices per worker, makespan (s)."""

    tp_degrees: list[int]
    groups: list[list[int]]
    makespan_s: float

    @property
    def num_gpus(self) -> int:
        return sum(self.tp_degrees)


class ResourceProblem:
    """Predicted lengths (output tokens), a GPU budget and a cost model per allowed TP degree.

    Degrees whose model does not fit (no KV room for one sequence of ``context_tokens``) or
    that exceed the budget are dropped. Tables are built once per degree and configurations are
    priced once each (memoised), so a search pays only for new configurations.
    """

    def __init__(
        self,
        lengths: Sequence[float],
        num_gpus: int,
        cost_models: Mapping[int, CostModel],
        context_tokens: int,
    ) -> None:
        if num_gpus < 1:
            raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")
        if context_tokens < 0:
            raise ValueError(f"context_tokens must be >= 0, got {context_tokens}")
        values = check_lengths(lengths)
        self.num_gpus = num_gpus
        self.lengths: list[float] = values
        """The predicted lengths in input order (plans' groups index them)."""
        self._order = longest_first(values)
        self._sorted = [values[index] for index in self._order]
        self._interference = {
            tp: TpInterference(model, context_tokens)
            for tp, model in sorted(cost_models.items())
            if tp <= num_gpus and TpInterference(model, context_tokens).max_batch >= 1
        }
        if not self._interference:
            raise ValueError(
                f"no TP degree among {sorted(cost_models)} fits {num_gpus} GPUs with room for "
                f"one sequence of {context_tokens} tokens"
            )
        self._context_tokens = context_tokens
        self._tables: dict[int, BlockTable] = {}
        self._makespans: dict[tuple[int, ...], float] = {}
        self._exact_makespans: dict[tuple[int, ...], float] = {}

    @property
    def tp_degrees(self) -> list[int]:
        """The allowed degrees, ascending."""
        return list(self._interference)

    @cached_property
    def min_degree(self) -> int:
        return min(self._interference)

    def per_token_s(self, tp_degree: int) -> float:
        return self._interference[tp_degree].cost_model.solo_token_s(self._context_tokens)

    def makespan_s(self, tp_degrees: Sequence[int], *, exact: bool = False) -> float:
        """The placement makespan of a configuration, memoised per multiset. ``exact=False``
        tries the type orders only (fast, an upper bound); ``exact=True`` certifies it."""
        key = canonical(tp_degrees)
        self._check(key)
        memo = self._exact_makespans if exact else self._makespans
        if key not in memo:
            memo[key] = self._split(key, exact=exact).makespan
        return memo[key]

    @property
    def num_evaluations(self) -> int:
        """Distinct configurations priced so far (both modes)."""
        return len(self._makespans.keys() | self._exact_makespans.keys())

    def plan(self, tp_degrees: Sequence[int]) -> ResourcePlan:
        """The exact placement on a configuration: workers by TP descending (the paper's
        mapping order), each with the trajectory indices it runs."""
        key = canonical(tp_degrees)
        self._check(key)
        split = self._split(key, exact=True)
        distinct = sorted(set(key), reverse=True)
        groups: dict[int, list[list[int]]] = {tp: [] for tp in distinct}
        position = 0
        for kind, size in zip(split.types, split.sizes, strict=True):
            groups[distinct[kind]].append(self._order[position : position + size])
            position += size
        ordered: list[list[int]] = []
        for tp in distinct:
            runs = groups[tp] + [[] for _ in range(key.count(tp) - len(groups[tp]))]
            ordered.extend(runs)
        return ResourcePlan(list(key), ordered, split.makespan)

    def best_cover(self, degrees: Sequence[int] | None = None) -> Cover | None:
        """The exact optimum over every configuration of the allowed ``degrees`` (default: all)
        within the budget (``heddle.policy.resources.budget_search``); None if none is finite."""
        allowed = self.tp_degrees if degrees is None else sorted(set(degrees))
        unknown = sorted(set(allowed) - set(self._interference))
        if unknown or not allowed:
            raise ValueError(f"TP degree(s) {unknown} not allowed; allowed {self.tp_degrees}")
        tables = {tp: self._table(tp) for tp in allowed}
        return best_cover(self._sorted, tables, self.num_gpus)

    def plan_from_cover(self, cover: Cover, fill: Sequence[int] | None = None) -> ResourcePlan:
        """A cover as a plan: its workers by TP descending with their blocks, and the unused
        GPUs filled with idle workers of the largest degrees of ``fill`` (default: all allowed)
        that fit (an idle worker never raises the makespan; the live placer may use it)."""
        runs: dict[int, list[list[int]]] = {}
        position = 0
        for degree, size in zip(cover.degrees, cover.sizes, strict=True):
            runs.setdefault(degree, []).append(self._order[position : position + size])
            position += size
        left = cover.unused_gpus
        for degree in sorted(self._interference if fill is None else fill, reverse=True):
            while degree <= left:
                runs.setdefault(degree, []).append([])
                left -= degree
        tp_degrees = [tp for tp in sorted(runs, reverse=True) for _ in runs[tp]]
        groups = [group for tp in sorted(runs, reverse=True) for group in runs[tp]]
        return ResourcePlan(tp_degrees, groups, cover.makespan)

    def _split(self, key: tuple[int, ...], *, exact: bool) -> TypedSplit:
        distinct = sorted(set(key), reverse=True)
        tables = [self._table(tp) for tp in distinct]
        counts = [key.count(tp) for tp in distinct]
        return solve_typed(self._sorted, tables, counts, exact=exact)

    def _table(self, tp_degree: int) -> BlockTable:
        if tp_degree not in self._tables:
            self._tables[tp_degree] = cost_table(
                self._interference[tp_degree], len(self._sorted), self.per_token_s(tp_degree)
            )
        return self._tables[tp_degree]

    def _check(self, key: tuple[int, ...]) -> None:
        if not key:
            raise ValueError("a configuration needs at least one worker")
        unknown = sorted(set(key) - set(self._interference))
        if unknown:
            raise ValueError(f"TP degree(s) {unknown} not allowed; allowed {self.tp_degrees}")
        if sum(key) > self.num_gpus:
            raise ValueError(f"configuration {list(key)} needs {sum(key)} > {self.num_gpus} GPUs")


def canonical(tp_degrees: Sequence[int]) -> tuple[int, ...]:
    """A configuration as a multiset: degrees sorted descending."""
    return tuple(sorted(tp_degrees, reverse=True))


def fixed_configuration(problem: ResourceProblem, tp_degree: int) -> tuple[int, ...]:
    """Homogeneous Fix-k: as many TP-k workers as fit. With fewer GPUs than ``k`` (or ``k`` not
    allowed), the largest allowed degree below it."""
    fitting = [tp for tp in problem.tp_degrees if tp <= tp_degree]
    degree = max(fitting) if fitting else problem.min_degree
    return (degree,) * (problem.num_gpus // degree)


def all_configurations(problem: ResourceProblem) -> list[tuple[int, ...]]:
    """Every maximal configuration (leftover GPUs fewer than the smallest degree): adding a
    worker never raises the optimum (it may stay empty), so smaller ones are dominated."""
    degrees = sorted(problem.tp_degrees, reverse=True)
    found: list[tuple[int, ...]] = []

    def extend(prefix: list[int], first: int, left: int) -> None:
        if left < problem.min_degree:
            found.append(tuple(prefix))
            return
        for index in range(first, len(degrees)):
            if degrees[index] <= left:
                extend([*prefix, degrees[index]], index, left - degrees[index])

    extend([], 0, problem.num_gpus)
    return found


def exhaustive_search(problem: ResourceProblem, *, max_configurations: int = 5000) -> ResourcePlan:
    """The best configuration by exact evaluation of all of them (small budgets; ``ValueError``
    beyond ``max_configurations``)."""
    configurations = all_configurations(problem)
    if len(configurations) > max_configurations:
        raise ValueError(
            f"{len(configurations)} configurations for {problem.num_gpus} GPUs exceed "
            f"max_configurations={max_configurations}; use annealing"
        )
    best = min(configurations, key=lambda key: (problem.makespan_s(key, exact=True), key))
    return problem.plan(best)
