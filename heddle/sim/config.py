"""Configuration of a simulated rollout: the cluster, the predictor, transfers and tools."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from heddle.control.reshard import DEFAULT_ENGINE_RESTART_S
from heddle.policy.cost.model import (
    HARDWARE,
    MODELS,
    AnalyticCostModel,
    CostModel,
    preset,
    weight_load_s,
)
from heddle.policy.engine_models import EngineModel, engine_model
from heddle.policy.migration.transfers import DEFAULT_LINK_BANDWIDTH_BYTES_S
from heddle.policy.prediction import CONTEXT_PREDICTOR, PREDICTORS

# Setup of one transfer (connection, memory registration, control messages). Assumption.
DEFAULT_TRANSFER_LATENCY_S = 0.005
# HGX H100 / H200 servers: 8 GPUs on one NVLink switch; a TP group stays inside one.
DEFAULT_GPUS_PER_NODE = 8

# The control plane's decision and routing latency, live (docs/benchmarks.md, "Live system
# fidelity and control-plane overhead"): a step's routing, ToolReturned -> next
# GenerationStarted, has a median of 2.0-3.0 wall ms at time scales 10-50; at 6,400 live
# trajectories (`heddle bench control`, ~3,000 events/s) a decision takes 1.9-4.8 ms at the
# median and 53-70 ms at the 99th percentile on the loaded 2-core VM (6.7 ms on a quiet 16-core
# host). We take the loaded figures: a median of 3 ms and a p99 of 60 ms.
DEFAULT_CONTROL_LATENCY_P50_MS = 3.0
DEFAULT_CONTROL_LATENCY_P99_MS = 60.0

SIM_PREDICTORS = (*PREDICTORS, CONTEXT_PREDICTOR)
"""The registry's predictors, and the context model (given to ``simulate`` as a function)."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    model: str = "qwen3-32b"
    """Cost-model preset (``heddle.policy.cost.model.MODELS``)."""
    hardware: str = "h200"
    """``h100`` or ``h200``."""
    num_gpus: int = 16
    """GPU budget; the system's resource plan splits it into workers of some TP degrees."""
    engine_model: str = "sglang"
    """How every system's engines behave (``heddle.policy.engine_models.ENGINE_MODELS``):
    prefix eviction, what preemption does to KV, whether KV moves on migration. One engine
    model per comparison, whatever the bundle."""
    seed: int = 0
    """Seeds the predictor's noise, random routers and the annealer."""
    predictor: str = "online"
    """Predictor of the bundles that predict (``SIM_PREDICTORS``): by default the online
    model a live rollout uses; the oracles are labelled studies; ``context`` needs the model
    (``simulate(context=...)``)."""
    predictor_sigma: float = 0.5
    """Noisy oracle: log-error standard deviation at the first prediction (assumption: a
    regression model of moderate quality; ``heddle sim figures`` sweeps it)."""
    predictor_sigma_decay: float = 0.8
    """Noisy oracle: multiplier per completed step of sigma's excess over the floor."""
    predictor_sigma_floor: float = 0.25
    """Noisy oracle: the error a trajectory's remaining amount keeps however far it has run.

    The default error model is progressive, as the paper's Fig. 9 and 13 describe (accuracy
    rises with the steps seen; Heddle-2 beats Heddle-1): sigma 0.5 before the first step,
    0.45 / 0.41 / 0.35 / 0.29 after 1 / 2 / 4 / 8 steps, never below 0.25, with 0.8 of its
    log error persistent over a trajectory's steps. On the coding workload (1024, seed 0) that
    is Pearson 0.78 / 0.89 / 0.93 and long-tail recall 0.61 / 0.73 / 0.79 after 0 / 4 / 8
    steps, against 0.53 / 0.70 / 0.72 and 0.44 / 0.54 / 0.58 for the online ridge model
    (``heddle.policy.prediction.online``): a better model than ours, as the paper's fine-tuned
    LM should be, but never exact.
    Assumption: the paper gives no numbers; ``heddle sim figures`` sweeps sigma."""
    predictor_step_correlation: float = 0.8
    """Noisy oracle: correlation of a trajectory's errors across steps (assumption: a learned
    regressor sees nearly the same context at consecutive steps, so its error persists)."""
    predictor_latency_ms: float = 0.0
    """``context``: the prediction service's round trip; an answer later than the tool call it
    overlaps gives way to the online model's (``TimedContextPredictor``)."""
    link_bandwidth_bytes_s: float = DEFAULT_LINK_BANDWIDTH_BYTES_S
    transfer_latency_s: float = DEFAULT_TRANSFER_LATENCY_S
    tool_cold_start_s: float = 0.0
    """Extra seconds of a tool call that finds no warm executor."""
    num_warm_executors: int | None = None
    """Pre-warmed executors (None: an elastic pool that is always warm)."""
    max_running: int = 1024
    """Per-worker cap on concurrent generations (KV capacity usually binds first)."""
    weight_load_s: float | None = None
    """Seconds a worker pauses to swap in new weights (None: the model's weight bytes over
    ``heddle.policy.cost.model.WEIGHT_LOAD_BYTES_S_PER_GPU`` per GPU of its TP degree)."""
    control_latency_p50_ms: float = DEFAULT_CONTROL_LATENCY_P50_MS
    """Median delay from an event to the command it causes reaching the worker, for every
    command of every system (``heddle.sim.command_delays``); 0 with the p99 at 0: none."""
    control_latency_p99_ms: float = DEFAULT_CONTROL_LATENCY_P99_MS
    """Its 99th percentile (a lognormal through both)."""
    engine_restart_s: float = DEFAULT_ENGINE_RESTART_S
    """A re-shard's switch, weights aside: the members' engines stopped and the merged one
    started (``heddle.control.reshard.DEFAULT_ENGINE_RESTART_S`` says what it stands for); its
    weights then load at ``weight_load_s_for_tp`` of the new degree."""
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    """GPUs of one node: the plan's workers are packed into nodes in order
    (``heddle.policy.resources.nodes``), and a re-shard merges workers of one node."""
    record_worker_timelines: bool = False
    record_events: bool = False
    """Keep every event in order (decider replay tests; memory grows with the rollout)."""

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {sorted(MODELS)}")
        if self.hardware not in HARDWARE:
            raise ValueError(
                f"unknown hardware {self.hardware!r}; choose one of {sorted(HARDWARE)}"
            )
        if self.num_gpus < 1:
            raise ValueError(f"num_gpus must be >= 1, got {self.num_gpus}")
        engine_model(self.engine_model)  # a clear error for an unknown name
        if self.predictor not in SIM_PREDICTORS:
            raise ValueError(
                f"unknown predictor {self.predictor!r}; choose one of {sorted(SIM_PREDICTORS)}"
            )
        if not self.predictor_latency_ms >= 0:
            raise ValueError(f"predictor_latency_ms must be >= 0, got {self.predictor_latency_ms}")
        for name in ("link_bandwidth_bytes_s",):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if not self.transfer_latency_s >= 0 or not self.tool_cold_start_s >= 0:
            raise ValueError("transfer_latency_s and tool_cold_start_s must be >= 0")
        if self.num_warm_executors is not None and self.num_warm_executors < 0:
            raise ValueError("num_warm_executors must be >= 0")
        if self.max_running < 1:
            raise ValueError(f"max_running must be >= 1, got {self.max_running}")
        if not 0 <= self.control_latency_p50_ms <= self.control_latency_p99_ms < math.inf:
            raise ValueError(
                "need 0 <= control_latency_p50_ms <= control_latency_p99_ms (finite), got "
                f"{self.control_latency_p50_ms} and {self.control_latency_p99_ms}"
            )
        if self.weight_load_s is not None and not self.weight_load_s >= 0:
            raise ValueError(f"weight_load_s must be >= 0, got {self.weight_load_s}")
        if not (self.engine_restart_s >= 0 and math.isfinite(self.engine_restart_s)):
            raise ValueError(f"engine_restart_s must be >= 0, got {self.engine_restart_s}")
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be >= 1, got {self.gpus_per_node}")

    def cost_for_tp(self, tp_degree: int) -> CostModel:
        return _preset(self.model, self.hardware, tp_degree)

    def weight_load_s_for_tp(self, tp_degree: int) -> float:
        """How long a worker of ``tp_degree`` GPUs pauses to load a weight version."""
        if self.weight_load_s is not None:
            return self.weight_load_s
        return weight_load_s(self.model, tp_degree)

    @property
    def engine(self) -> EngineModel:
        return engine_model(self.engine_model)

    @property
    def kv_bytes_per_token(self) -> int:
        return MODELS[self.model].kv_bytes_per_token


@lru_cache(maxsize=64)
def _preset(model: str, hardware: str, tp_degree: int) -> AnalyticCostModel:
    return preset(model, hardware, tp_degree)
