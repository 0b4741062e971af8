"""A system bundle's deciders (``DeciderBundle``): its deciders in dispatch order and the
engines' batching settings, built from the bundle (``heddle.control.systems``) and the run's
options. The simulator drives one; the live control plane process (``heddle.controlplane``)
holds one per policy in use (``heddle.control.bundle_router``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal

from heddle.control.decider import Decider
from heddle.control.output_gate import GatedDeciders
from heddle.control.placement import (
    Admission,
    AdmissionConfig,
    CapConfig,
    KvAdmissionGate,
    PlacementDecider,
    Placer,
    PresortedPlacer,
    ProgramGate,
    ProgramGateConfig,
    RouterPlacer,
    TrajectoryCap,
)
from heddle.control.prediction import PredictionDecider
from heddle.control.priority import PriorityConfig, PriorityDecider
from heddle.control.reshard import ReshardConfig, ReshardDecider
from heddle.control.resources import DEFAULT_OBSERVATION_RATIO
from heddle.control.rollout import RolloutDecider
from heddle.control.systems import PRESORTED, SystemSpec
from heddle.control.transfer import TransferDecider
from heddle.policy.batching import BatchingConfig
from heddle.policy.cost.model import CostModel
from heddle.policy.engine_models import DEFAULT_ENGINE_MODEL, EngineModel, engine_model
from heddle.policy.prediction import Predictor
from heddle.policy.scheduling.priority import priority_policy

DEFAULT_PLACEMENT_HEDGE = 0.5
CapSetting = int | Literal["default", "off"]
"""The cap of a bundle with a concurrency control (``SystemSpec.concurrency``): its code's
default per engine, none, or a total number of units (trajectories or groups, >= 1). For a
bundle with KV admission (``SystemSpec.admits``), its admission: KV admission ("default"), none
("off"), or a static cap on running trajectories (a number)."""


@dataclass(frozen=True, slots=True)
class ControlOptions:
    cost_for_tp: Callable[[int], CostModel]
    """The cost model of a worker of each TP degree (placement and resource plans)."""
    predictor: Predictor | None = None
    """Required by bundles that use predictions."""
    seed: int = 0
    engine_model: str = DEFAULT_ENGINE_MODEL
    """How the engines behave (``heddle.policy.engine_models``); the same for every bundle."""
    migration_hysteresis: float = 0.25
    observation_ratio: float = DEFAULT_OBSERVATION_RATIO
    """Observation tokens per output token (``heddle.control.resources.observation_ratio``)."""
    tool_s_per_token: float = 0.0
    """Tool seconds per output token for the planners (``AgenticCostModel``; 0: token-only)."""
    tool_call_s: float = 0.0
    """Mean seconds of a tool call in earlier rollouts (KV admission's prior, before the
    rollout's own calls are seen; 0: none known)."""
    pps_relative_change: float = 0.05
    """PPS/SPF: re-prioritise only when a prediction moves by more than this fraction."""
    admission: AdmissionConfig = AdmissionConfig()
    """KV admission of the bundles that run it (``SystemSpec.admits``)."""
    concurrency_cap: CapSetting = "default"
    """The cap of a bundle with a concurrency control (the simulator's plan check chooses it
    on the history; a live control plane runs the code's default)."""
    program_gate: ProgramGateConfig = ProgramGateConfig()
    """ThunderAgent's scheduler settings (``SystemSpec.program_gate``)."""
    placement_hedge: float | None = None
    """How far presorted block sizes move towards equal groups against prediction errors
    (``heddle.policy.placement.robust.hedged``). None: 0 for the oracle (exact lengths leave
    nothing to hedge against), ``DEFAULT_PLACEMENT_HEDGE`` for every other predictor; the
    simulator and the live control plane decide it here, so a re-simulation of a recorded
    rollout places as the rollout did."""
    weight_load_s_for_tp: Callable[[int], float] | None = None
    """Seconds a worker of each TP degree pauses to load a weight version (placement's estimate
    of a swapping worker's wait, and a re-shard's weight load); None: the pause is not counted."""
    reshard: ReshardConfig = ReshardConfig()
    """Tail re-sharding, for the bundles that run it (``SystemSpec.reshard``)."""

    @property
    def engine(self) -> EngineModel:
        return engine_model(self.engine_model)

    @property
    def transfer_kv(self) -> bool:
        """Migrations move the KV cache (the engine model's); else the target re-prefills."""
        return self.engine.kv_transfer

    @property
    def effective_placement_hedge(self) -> float:
        if self.placement_hedge is not None:
            return self.placement_hedge
        is_exact = self.predictor is not None and self.predictor.name == "oracle"
        return 0.0 if is_exact else DEFAULT_PLACEMENT_HEDGE


@dataclass(slots=True)
class DeciderBundle:
    """The deciders of one bundle, in dispatch order, and the engines' batching config."""

    spec: SystemSpec
    deciders: list[Decider]
    engine: BatchingConfig = field(default_factory=BatchingConfig)
    concurrency_cap: CapSetting = "default"
    """The cap its admission runs (a bundle with a concurrency control)."""
    admission: str = ""
    """What a bundle with KV admission runs (``admission_label``; "" for the others)."""

    def gated(self, names: Collection[str] | None = None) -> GatedDeciders:
        """Its deciders (those ``names`` names, all by default) in dispatch order behind an
        output gate of their own (``heddle.control.output_gate``): what the bundle emits for
        each event. A live control plane decides a batch in stages (the router's first), so it
        gates each stage apart; the simulator runs them all behind one gate."""
        chosen = self.deciders if names is None else [d for d in self.deciders if d.name in names]
        return GatedDeciders(chosen)


def build_bundle(spec: SystemSpec, options: ControlOptions) -> DeciderBundle:
    policy = priority_policy(spec.priority)
    hysteresis = options.pps_relative_change if spec.priority in ("pps", "spf") else 0.0
    deciders: list[Decider] = []
    if spec.uses_predictions:
        if options.predictor is None:
            raise ValueError(f"system {spec.name!r} needs a predictor")
        deciders.append(PredictionDecider(options.predictor))
    if spec.reshard:
        # Before placement: a retired member's trajectories reach the leader after its Reshard.
        deciders.append(ReshardDecider(options.cost_for_tp, _load_s(options), options.reshard))
    # Placement before priority: when one event moves both (a tool result under round robin),
    # the router's request goes out first and the priority decider's Reprioritize, carrying the
    # priority that event set, lands after it rather than being overwritten by it.
    admission = _admission(spec, options)
    placement = PlacementDecider(
        _placer_factory(spec, options),
        admission=admission,
        weight_load_s_for_tp=options.weight_load_s_for_tp,
    )
    deciders.append(placement)
    deciders.append(PriorityDecider(policy, PriorityConfig(min_relative_change=hysteresis)))
    if spec.migration:
        deciders.append(TransferDecider(transfer_kv=options.transfer_kv))
    deciders.append(RolloutDecider())
    engine = engine_config(spec, options.engine)
    return DeciderBundle(
        spec, deciders, engine, options.concurrency_cap, admission_label(spec, options)
    )


def admission_label(spec: SystemSpec, options: ControlOptions) -> str:
    """What a bundle with KV admission runs: ``kv x<overcommit>``, ``cap <n>`` or ``off``
    ("" for a bundle without KV admission)."""
    if not spec.admits:
        return ""
    setting = options.concurrency_cap
    if setting == "default":
        return f"kv x{options.admission.overcommit:g}"
    return "off" if setting == "off" else f"cap {setting}"


def _load_s(options: ControlOptions) -> Callable[[int], float]:
    """A re-shard's weight load by degree (0 where the options know no load time)."""
    if options.weight_load_s_for_tp is not None:
        return options.weight_load_s_for_tp
    return lambda tp_degree: 0.0


def _admission(spec: SystemSpec, options: ControlOptions) -> Admission | None:
    """The bundle's admission: KV admission (Heddle's bundles), ThunderAgent's program gate, a
    baseline's concurrency cap, or none (the decider starts trajectories at once)."""
    if spec.program_gate:
        return ProgramGate(options.program_gate)
    if spec.admits:
        return _kv_admission(spec, options)
    cap = cap_config(spec, options.concurrency_cap)
    return TrajectoryCap(cap) if cap is not None else None


def _kv_admission(spec: SystemSpec, options: ControlOptions) -> Admission | None:
    """A bundle with KV admission under its setting (``options.concurrency_cap``, the plan
    check's choice): KV admission by ``options.admission``, a static cap, or none."""
    setting = options.concurrency_cap
    if setting == "off":
        return None
    if setting != "default":
        return TrajectoryCap(CapConfig(max_running=setting))
    policy = priority_policy(spec.priority)
    return KvAdmissionGate(
        options.admission,
        policy,
        observation_ratio=options.observation_ratio,
        prior_tool_call_s=options.tool_call_s,
        share_prompts=options.engine.prompt_sharing != "none",
    )


def cap_config(spec: SystemSpec, setting: CapSetting) -> CapConfig | None:
    """The concurrency cap ``setting`` gives the bundle (None: it runs uncapped)."""
    control = spec.concurrency
    if control is None or setting == "off":
        return None
    if setting == "default":
        if not control.default_per_worker:
            return None
        return CapConfig(per_worker=control.default_per_worker, per_group=control.per_group)
    if setting < 1:
        raise ValueError(f"a concurrency cap must be >= 1, got {setting}")
    return CapConfig(max_running=setting, per_group=control.per_group)


def engine_config(spec: SystemSpec, engine: EngineModel) -> BatchingConfig:
    """The engines' batching settings: the engine model's, preempting where the bundle's
    priority policy is preemptive (engines preempt only when the priorities sent differ) and,
    on an engine whose preemption drops KV, only if the bundle preempts there."""
    preemptive = priority_policy(spec.priority).is_preemptive
    if not engine.preemption_keeps_kv and not spec.preempts_losing_kv:
        preemptive = False
    return engine.batching_config(preemptive=preemptive)


def _placer_factory(spec: SystemSpec, options: ControlOptions) -> Callable[[], Placer]:
    if spec.placement == PRESORTED:

        def presorted() -> Placer:
            return PresortedPlacer(
                options.cost_for_tp,
                migration=spec.migration,
                kv_transfer=options.transfer_kv,
                hysteresis=options.migration_hysteresis,
                observation_ratio=options.observation_ratio,
                tool_s_per_token=options.tool_s_per_token,
                hedge=options.effective_placement_hedge,
                rebalance=spec.rebalance,
            )

        return presorted
    rng = random.Random(options.seed)

    def routed() -> Placer:
        return RouterPlacer(
            spec.placement, rng, locality_threshold_tokens=spec.locality_threshold_tokens
        )

    return routed
