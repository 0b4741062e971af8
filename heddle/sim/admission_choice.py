"""The admission settings the plan check tries for a bundle with KV admission
(``heddle.control.systems.SystemSpec.admits``) on its chosen TP plan, its default first.

KV admission's one knob is its overcommit (``AdmissionConfig.overcommit``: how far the admitted
trajectories' projected KV may exceed a worker's capacity). A user with the previous step in
hand would also try what a baseline runs instead: the static cap on running trajectories that
``heddle.sim.concurrency_caps`` derives for a baseline (``STATIC_CAP_MULTIPLIER`` x the plan's KV
over the history's mean final context of a trajectory), and no admission at all. So: the default
(overcommit ``DEFAULT_OVERCOMMIT``), the overcommits of ``OVERCOMMITS``, the static cap (when it
binds) and off; the plan check keeps the default unless another is ``SWITCH_MARGIN`` faster on
the history, chosen there and judged on the rollout (cross-fitted: issue 36, item 5). Cost:
at most four more simulations of the history per bundle with KV admission.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.control.bundle import CapSetting
from heddle.control.placement import AdmissionConfig
from heddle.control.systems import STATIC_CAP
from heddle.sim.concurrency_caps import mean_unit_footprint
from heddle.sim.config import SimConfig
from heddle.traces import TraceTrajectory

DEFAULT_OVERCOMMIT = AdmissionConfig().overcommit
OVERCOMMITS = (1.0, 1.5)
"""Overcommits tried besides the default."""
STATIC_CAP_MULTIPLIER = 1.2
"""The static cap tried: this times the plan's KV over the history's mean final context (the
multiplier issue 36 gave every baseline: Heddle's own overcommit)."""


@dataclass(frozen=True, slots=True)
class AdmissionSetting:
    """KV admission at ``overcommit`` (``cap = "default"``), a static cap, or none (``off``)."""

    cap: CapSetting = "default"
    overcommit: float = DEFAULT_OVERCOMMIT


def admission_settings(
    tp_degrees: Sequence[int],
    config: SimConfig,
    trace: Sequence[TraceTrajectory],
    history: Sequence[TraceTrajectory],
) -> list[AdmissionSetting]:
    """The settings to try on ``tp_degrees`` for a rollout of ``trace``, the default first
    (only the default without a history)."""
    settings = [AdmissionSetting()]
    if not history:
        return settings
    settings += [AdmissionSetting(overcommit=overcommit) for overcommit in OVERCOMMITS]
    kv_tokens = sum(config.cost_for_tp(tp).max_kv_tokens for tp in tp_degrees)
    footprint = mean_unit_footprint(history, STATIC_CAP)
    cap = max(1, math.floor(STATIC_CAP_MULTIPLIER * kv_tokens / footprint))
    if cap < len(trace):
        settings.append(AdmissionSetting(cap=cap))
    settings.append(AdmissionSetting(cap="off"))
    return settings
