"""The concurrency caps the plan check tries for a baseline with a concurrency control
(``heddle.control.systems.ConcurrencyControl``) on a TP plan, its code's default first.

What a user of the baseline would set, given the previous step: the code's default (slime: 512
per engine; verl's synchronous agent loop: none), the setting its docs name (slime: 160 per
engine; verl's fully-async rollouter: 16 prompts per replica), no cap, and caps derived from the
plan's KV and the history, as Heddle's admission budgets its own: ``m`` times the plan's KV
tokens over the history's mean final footprint of a unit (a trajectory's final context; a
group's final contexts with its shared prompt counted once, as SGLang's radix cache holds it),
for ``m`` in ``KV_CAP_MULTIPLIERS`` (1.2 is Heddle's own overcommit). A cap that admits every
unit of the rollout at once is the same run as no cap, and caps that give the same total are the
same run: each is tried once. Without a history there is nothing to derive from, and the default
runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from heddle.control.bundle import CapSetting
from heddle.control.systems import ConcurrencyControl, SystemSpec
from heddle.sim.config import SimConfig
from heddle.traces import TraceTrajectory

KV_CAP_MULTIPLIERS = (0.8, 1.2, 1.6, 2.4)
"""Caps of ``m`` x the plan's KV over the history's mean unit footprint."""


def cap_candidates(
    spec: SystemSpec,
    tp_degrees: Sequence[int],
    config: SimConfig,
    trace: Sequence[TraceTrajectory],
    history: Sequence[TraceTrajectory],
) -> list[CapSetting]:
    """The distinct caps to try on ``tp_degrees`` for a rollout of ``trace``, the default
    first (only the default for a bundle without a concurrency control or without history)."""
    control = spec.concurrency
    if control is None or not history:
        return ["default"]
    units = num_units(trace, control)
    settings: list[CapSetting] = ["default", "off"]
    per_worker = [control.documented_per_worker] if control.documented_per_worker else []
    settings += [n * len(tp_degrees) for n in per_worker]
    kv_tokens = sum(config.cost_for_tp(tp).max_kv_tokens for tp in tp_degrees)
    footprint = mean_unit_footprint(history, control)
    settings += [max(1, math.floor(m * kv_tokens / footprint)) for m in KV_CAP_MULTIPLIERS]
    distinct: list[CapSetting] = []
    seen: set[int] = set()
    for setting in settings:
        total = _total(setting, control, len(tp_degrees), units)
        if total not in seen:
            seen.add(total)
            distinct.append(setting)
    return distinct


def effective_cap(
    spec: SystemSpec, setting: CapSetting, num_workers: int, trace: Sequence[TraceTrajectory]
) -> int | None:
    """The units ``setting`` lets ``spec`` run at once on ``num_workers`` workers (None: no
    bound, or one no lower than the rollout's units)."""
    control = spec.concurrency
    if control is None:
        return None
    units = num_units(trace, control)
    total = _total(setting, control, num_workers, units)
    return None if total >= units else total


def num_units(trace: Sequence[TraceTrajectory], control: ConcurrencyControl) -> int:
    """What the rollout counts in the control's units."""
    if not control.per_group:
        return len(trace)
    return len({t.group or f"#{index}" for index, t in enumerate(trace)})


def mean_unit_footprint(history: Sequence[TraceTrajectory], control: ConcurrencyControl) -> float:
    """Mean final KV of a unit of ``history`` (tokens, at least 1)."""
    if not control.per_group:
        return max(1.0, sum(t.num_context_tokens for t in history) / len(history))
    groups: dict[str, list[TraceTrajectory]] = {}
    for index, t in enumerate(history):
        groups.setdefault(t.group or f"#{index}", []).append(t)
    totals = [
        sum(t.num_context_tokens for t in members) - (len(members) - 1) * members[0].prompt_tokens
        for members in groups.values()
    ]
    return max(1.0, sum(totals) / len(totals))


def _total(
    setting: CapSetting, control: ConcurrencyControl, num_workers: int, num_units: int
) -> int:
    """The bound in units, ``num_units`` for none (no lower bound is ever tighter)."""
    if setting == "off":
        return num_units
    if setting == "default":
        per_worker = control.default_per_worker
        return min(num_units, per_worker * num_workers) if per_worker else num_units
    return min(num_units, setting)
