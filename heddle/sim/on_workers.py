"""Simulate one rollout of a trace on given workers: the bundle's control plane for a fixed
cluster (its predictor, its cap or admission), the simulator's run and its report against the
lower bound of ``heddle.policy.lower_bound``.

``heddle.sim.run.simulate`` plans the workers first (``heddle.sim.planning``), whose check by
simulation runs here on the history's candidate plans: so the planner builds on this module
and no module imports back up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from heddle.control.bundle import (
    CapSetting,
    ControlOptions,
    DeciderBundle,
    build_bundle,
)
from heddle.control.placement import AdmissionConfig
from heddle.control.reshard import ReshardConfig
from heddle.control.resources import HistoryRates
from heddle.control.systems import SystemSpec
from heddle.policy.cost.model import TP_DEGREES
from heddle.policy.lower_bound import makespan_lower_bound
from heddle.policy.prediction import (
    CONTEXT_PREDICTOR,
    ContextAnswer,
    Predictor,
    PredictorOptions,
    TimedContextPredictor,
    fit,
    make_predictor,
)
from heddle.policy.prediction.cross_fit import cross_fit
from heddle.sim.concurrency_caps import effective_cap
from heddle.sim.config import SimConfig
from heddle.sim.results import SimResult, summarise
from heddle.sim.simulator import ProgressCallback, Simulator
from heddle.sim.trajectories import build_trajectories
from heddle.traces import TraceTrajectory


def simulate_on_workers(
    trace: Sequence[TraceTrajectory],
    spec: SystemSpec,
    config: SimConfig,
    tp_degrees: Sequence[int],
    *,
    history: Sequence[TraceTrajectory] = (),
    predictor: Predictor | None = None,
    concurrency_cap: CapSetting | None = None,
    overcommit: float | None = None,
) -> SimResult:
    """One rollout of ``trace`` under ``spec`` on workers of ``tp_degrees``; the arguments as
    for ``heddle.sim.run.simulate`` (``concurrency_cap`` and ``overcommit`` None: the
    defaults)."""
    predictor = bundle_predictor(trace, spec, config, history, None, predictor)
    rates = HistoryRates.of(history)
    control = control_on_workers(spec, config, rates, predictor, concurrency_cap, overcommit)
    return run_control(trace, spec, config, control, tp_degrees)


def bundle_predictor(
    trace: Sequence[TraceTrajectory],
    spec: SystemSpec,
    config: SimConfig,
    history: Sequence[TraceTrajectory],
    context: ContextAnswer | None,
    predictor: Predictor | None,
) -> Predictor | None:
    """The bundle's predictor: none for a bundle that does not predict, else ``predictor`` or
    the configured one (``make_simulation_predictor``)."""
    if not spec.uses_predictions:
        return None
    if predictor is None:
        return make_simulation_predictor(trace, config, history, context)
    return predictor


def control_on_workers(
    spec: SystemSpec,
    config: SimConfig,
    rates: HistoryRates,
    predictor: Predictor | None,
    concurrency_cap: CapSetting | None,
    overcommit: float | None,
) -> DeciderBundle:
    """A fresh control plane of ``spec`` with the history's ``rates``, ``predictor``, and a
    baseline's cap or a KV-admitting bundle's admission (None: the default)."""
    admission = AdmissionConfig()
    if overcommit is not None:
        admission = AdmissionConfig(overcommit=overcommit)
    options = ControlOptions(
        cost_for_tp=config.cost_for_tp,
        predictor=predictor,
        seed=config.seed,
        engine_model=config.engine_model,
        observation_ratio=rates.observation_ratio,
        tool_s_per_token=rates.tool_s_per_token,
        tool_call_s=rates.tool_call_s,
        weight_load_s_for_tp=config.weight_load_s_for_tp,
        reshard=ReshardConfig(restart_s=config.engine_restart_s),
        concurrency_cap=concurrency_cap if concurrency_cap is not None else "default",
        admission=admission,
    )
    return build_bundle(spec, options)


def run_control(
    trace: Sequence[TraceTrajectory],
    spec: SystemSpec,
    config: SimConfig,
    control: DeciderBundle,
    tp_degrees: Sequence[int],
    progress: ProgressCallback | None = None,
) -> SimResult:
    """Run ``control`` on workers of ``tp_degrees`` and report the rollout."""
    run = Simulator(trace, control, tp_degrees, config).run(progress)
    result = summarise(spec.name, run, list(tp_degrees), lower_bound_s(trace, config))
    cap = effective_cap(spec, control.concurrency_cap, len(tp_degrees), trace)
    return replace(result, concurrency_cap=cap, admission=control.admission or None)


def make_simulation_predictor(
    trace: Sequence[TraceTrajectory],
    config: SimConfig,
    history: Sequence[TraceTrajectory] = (),
    context: ContextAnswer | None = None,
) -> Predictor:
    """The configured predictor; the oracles know the trace under the simulator's ids. The
    context model (``context``) answers when its answer, ``config.predictor_latency_ms`` after
    the tool call, comes before the call returns; the online model (fitted on ``history``)
    answers otherwise."""
    ids = list(build_trajectories(trace))
    prior = sum(t.num_output_tokens for t in history) / len(history) if history else 8192.0
    options = PredictorOptions(
        seed=config.seed,
        sigma=config.predictor_sigma,
        sigma_decay=config.predictor_sigma_decay,
        sigma_floor=config.predictor_sigma_floor,
        step_correlation=config.predictor_step_correlation,
        trace=dict(zip(ids, trace, strict=True)),
        prior_total_tokens=prior,
    )
    if config.predictor != CONTEXT_PREDICTOR:
        return fit(make_predictor(config.predictor, options), history)
    if context is None:
        raise ValueError("the context predictor needs the model: simulate(..., context=...)")
    by_id = options.trace

    def tool_duration(traj_id: str, step: int) -> float:
        return by_id[traj_id].steps[step].tool_s

    fallback = fit(make_predictor("online", options), history)
    latency_s = config.predictor_latency_ms / 1000
    return TimedContextPredictor(fallback, context, latency_s, tool_duration)


def cross_fitted(trace: Sequence[TraceTrajectory], config: SimConfig) -> Predictor:
    """The configured predictor for a simulation of ``trace`` by a check that has nothing else
    to learn from: cross-fitted on ``trace`` itself (``heddle.policy.prediction.cross_fit``),
    so it never predicts a trajectory it observed. Not for the context model."""
    return cross_fit(
        trace,
        list(build_trajectories(trace)),
        lambda learned_from: make_simulation_predictor(trace, config, learned_from),
    )


def lower_bound_s(
    trace: Sequence[TraceTrajectory], config: SimConfig, *, kv_aware: bool = True
) -> float:
    """The makespan no policy of this simulator can beat (``heddle.policy.lower_bound``), with
    the options its engines allow: the engine model's prompt sharing (a group's prompt held and
    prefilled once by SGLang's radix cache, a copy per trajectory in the torch engine), prefill
    that stalls decoding and the engines' running cap. ``kv_aware=False``: the same bound
    without its KV term (the compute-only bound, for comparison)."""
    models = {tp: config.cost_for_tp(tp) for tp in TP_DEGREES if tp <= config.num_gpus}
    bound = makespan_lower_bound(
        trace,
        config.num_gpus,
        models,
        prompt_sharing=config.engine.prompt_sharing,
        overlapped_prefill=False,
        kv_aware=kv_aware,
        max_batch=config.max_running,
    )
    return bound.makespan_s
