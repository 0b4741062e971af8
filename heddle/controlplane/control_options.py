"""The options a live control plane builds its bundles with (``heddle.control.bundle_router``:
the same ``build_bundle`` as the simulator): the workers' cost model, the shared
predictor, the planners' ratios learnt from the history traces."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from heddle.control import ControlOptions
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
    predictor: Predictor | None = None,
    seed: int,
    transfer_kv: bool,
    history: Sequence[TraceTrajectory] = (),
    engine_restart_s: float = DEFAULT_ENGINE_RESTART_S,
) -> ControlOptions:
    """Options of every bundle; the planners' observation ratio and tool seconds per token come
    from ``history`` as in ``heddle.sim.simulate``. ``predictor``: the one every bundle's
    prediction decider shares (``heddle.controlplane.live_predictor``; None: an online model)."""
    rates = HistoryRates.of(history)
    return ControlOptions(
        cost_for_tp=cost_for_tp(cost_model, hardware),
        predictor=predictor if predictor is not None else OnlinePredictor(),
        seed=seed,
        # Live engines batch as they do; of the engine model only whether KV moves matters here.
        engine_model="torch" if transfer_kv else "sglang",
        observation_ratio=rates.observation_ratio,
        tool_s_per_token=rates.tool_s_per_token,
        tool_call_s=rates.tool_call_s,
        weight_load_s_for_tp=functools.partial(weight_load_s, cost_model),
        reshard=ReshardConfig(restart_s=engine_restart_s),
    )


def cost_for_tp(model: str, hardware: str) -> Callable[[int], CostModel]:
    """The preset cost model of each TP degree (cached: placers call it per decision)."""

    @functools.lru_cache(maxsize=8)
    def by_degree(tp_degree: int) -> CostModel:
        return preset(model, hardware, tp_degree)

    return by_degree
