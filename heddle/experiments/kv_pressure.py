"""KV pressure of a simulated cell: how far a trace's KV footprint oversubscribes the cluster's
KV, and a cluster whose KV is scaled down to reach a target oversubscription.

Definitions (stated once, reported per sweep cell):

* footprint: the sum over trajectories of their final context (prompt + generations +
  observations), the KV the rollout would hold if every trajectory were resident at its peak;
* capacity: the most KV tokens any homogeneous plan of the cluster holds (``num_gpus // tp``
  workers of ``max_kv_tokens(tp)``, best ``tp``): a plan can only do worse;
* ratio = footprint / capacity: above 1, the trajectories cannot all stay resident, and engines
  evict prefixes and re-prefill or queue.

A sweep affords a few hundred trajectories per cell, far fewer than a 64-GPU cluster holds, so
its high-pressure cells scale every worker's KV capacity by ``kv_scale`` (< 1) instead of
running more trajectories: as if each GPU kept only that share of its KV (a smaller
``mem_fraction_static``, or a colocated trainer's state). Compute is not scaled, so such a cell
is a smaller rollout on a KV-starved cluster, not a bigger rollout on a normal one. The scale is
floored so that a TP1 worker still holds the longest trajectory (with a 25% margin): every
bundle, Fix-1 included, can run every trajectory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache

from heddle.policy.cost.model import HARDWARE, MODELS, TP_DEGREES, AnalyticCostModel, preset
from heddle.sim.config import SimConfig
from heddle.traces import TraceTrajectory

FIT_MARGIN = 1.25
"""A TP1 worker's (scaled) KV holds the longest trajectory's final context this many times."""


@dataclass(frozen=True, slots=True)
class ScaledKvCostModel(AnalyticCostModel):
    """The calibrated preset with its KV capacity multiplied by ``kv_scale`` (times unchanged)."""

    kv_scale: float = 1.0

    @property
    def max_kv_tokens(self) -> int:
        return int(self.kv_scale * AnalyticCostModel.max_kv_tokens.fget(self))  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class ScaledKvSimConfig(SimConfig):
    """A ``SimConfig`` whose workers' KV capacity is scaled by ``kv_scale`` (in ``(0, 1]``);
    every consumer of ``cost_for_tp`` (engines, planner, placer, lower bound) sees the same."""

    kv_scale: float = 1.0

    def __post_init__(self) -> None:
        SimConfig.__post_init__(self)
        if not 0 < self.kv_scale <= 1:
            raise ValueError(f"kv_scale must be in (0, 1], got {self.kv_scale}")

    def cost_for_tp(self, tp_degree: int) -> ScaledKvCostModel:
        return _scaled_preset(self.model, self.hardware, tp_degree, self.kv_scale)


@lru_cache(maxsize=256)
def _scaled_preset(model: str, hardware: str, tp_degree: int, kv_scale: float) -> ScaledKvCostModel:
    return ScaledKvCostModel(MODELS[model], HARDWARE[hardware], tp_degree, kv_scale)


@dataclass(frozen=True, slots=True)
class KvPressure:
    """A cell's KV figures; ``ratio`` is what the cell runs at."""

    footprint_tokens: int
    capacity_tokens: int
    """The unscaled cluster's capacity (see the module doc)."""
    natural_ratio: float
    """footprint / capacity on the unscaled cluster."""
    kv_scale: float
    ratio: float
    """footprint / (kv_scale * capacity): the oversubscription the cell runs at."""
    target_ratio: float


def cluster_kv_tokens(model: str, hardware: str, num_gpus: int) -> int:
    """The most KV tokens a homogeneous plan of ``num_gpus`` GPUs holds (unscaled)."""
    return max(
        (num_gpus // tp) * preset(model, hardware, tp).max_kv_tokens
        for tp in TP_DEGREES
        if tp <= num_gpus
    )


def kv_pressure(
    traces: Sequence[Sequence[TraceTrajectory]],
    model: str,
    hardware: str,
    num_gpus: int,
    target_ratio: float,
) -> KvPressure:
    """The scale that brings the first trace's footprint to ``target_ratio`` times the cluster's
    capacity (never above 1: an unscaled cluster that is already past the target stays as is;
    never below the fit floor over every trace given, the rollout and its history)."""
    if target_ratio <= 0:
        raise ValueError(f"the target KV ratio must be > 0, got {target_ratio}")
    footprint = sum(t.num_context_tokens for t in traces[0])
    capacity = cluster_kv_tokens(model, hardware, num_gpus)
    natural = footprint / capacity
    longest = max(t.num_context_tokens for trace in traces for t in trace)
    floor = (
        FIT_MARGIN * longest / AnalyticCostModel(MODELS[model], HARDWARE[hardware]).max_kv_tokens
    )
    scale = min(1.0, max(natural / target_ratio, floor))
    # Rounded so the cost models' cache sees few distinct scales; the ratio uses the rounded one.
    scale = min(1.0, round(scale, 4) or 1e-4)
    return KvPressure(footprint, capacity, natural, scale, natural / scale, target_ratio)


def scaled_config(config: SimConfig, kv_scale: float) -> ScaledKvSimConfig:
    """``config`` with its workers' KV scaled by ``kv_scale``."""
    return ScaledKvSimConfig(**asdict(config), kv_scale=kv_scale)
