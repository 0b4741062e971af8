"""The system bundles a control plane builds: the same ``build_control_plane`` as the simulator,
with the options a live deployment knows (the workers' cost model, the shared predictor, the
planners' ratios learnt from the history traces)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace

from heddle.consumers.predictors import PredictionHooks
from heddle.consumers.slots import BundleFactory, SlotDeciders
from heddle.control import ControlOptions, build_control_plane, system_spec
from heddle.control import ControlPlane as Bundle
from heddle.control.reshard import DEFAULT_ENGINE_RESTART_S, ReshardConfig
from heddle.control.resources import HistoryRates
from heddle.policy.cost.model import CostModel, preset, weight_load_s
from heddle.policy.prediction import Predictor
from heddle.policy.prediction.online import OnlinePredictor
from heddle.traces import TraceTrajectory


def control_options(
    cost_model: str,
    hardware: str,
    *,
    seed: int,
    transfer_kv: bool,
    history: Sequence[TraceTrajectory] = (),
    engine_restart_s: float = DEFAULT_ENGINE_RESTART_S,
) -> ControlOptions:
    """Options of every bundle; the planners' observation ratio and tool seconds per token come
    from ``history`` as in ``heddle.sim.simulate``. The predictor is a placeholder: only the
    prediction slot predicts, with the shared predictor (``bundle_factory``)."""
    rates = HistoryRates.of(history)
    return ControlOptions(
        cost_for_tp=cost_for_tp(cost_model, hardware),
        predictor=OnlinePredictor(),
        seed=seed,
        # Live engines batch as they do; of the engine model only whether KV moves matters here.
        engine_model="torch" if transfer_kv else "sglang",
        observation_ratio=rates.observation_ratio,
        tool_s_per_token=rates.tool_s_per_token,
        tool_call_s=rates.tool_call_s,
        weight_load_s_for_tp=functools.partial(weight_load_s, cost_model),
        reshard=ReshardConfig(restart_s=engine_restart_s),
    )


def bundle_factory(options: ControlOptions, predictor: Predictor | None = None) -> BundleFactory:
    """Builds a bundle by policy name; ``predictor`` replaces the options' placeholder."""
    final = options if predictor is None else replace(options, predictor=predictor)

    def make_bundle(policy: str) -> Bundle:
        return build_control_plane(system_spec(policy), final)

    return make_bundle


@functools.lru_cache(maxsize=8)
def slot_deciders(slot: str, options: ControlOptions, hooks: PredictionHooks) -> SlotDeciders:
    """A slot's deciders; only the prediction slot predicts (with the shared predictor)."""
    if slot != "prediction":
        return SlotDeciders(slot, bundle_factory(options))
    return SlotDeciders(slot, bundle_factory(options, hooks.predictor), hooks)


def cost_for_tp(model: str, hardware: str) -> Callable[[int], CostModel]:
    """The preset cost model of each TP degree (cached: placers call it per decision)."""

    @functools.lru_cache(maxsize=8)
    def by_degree(tp_degree: int) -> CostModel:
        return preset(model, hardware, tp_degree)

    return by_degree
