"""Simulate one rollout of a trace under one system bundle: ``simulate(trace, "heddle")``.

Steps: build the bundle's predictor (fitted on ``history``: completed trajectories of earlier
rollouts, for the predictors that learn), plan the workers' TP degrees (``annealed`` on the first
predictions for Heddle; homogeneous otherwise, degree 0 picking the best homogeneous degree on
the true lengths, which is generous to the baselines) and a baseline's concurrency cap, checked
on the history (``heddle.sim.planning``), then build the control plane, run the simulator and
report against the lower bound (``heddle.sim.on_workers``, which the planner's check runs too).
"""

from __future__ import annotations

from collections.abc import Sequence

from heddle.control.bundle import CapSetting, DeciderBundle
from heddle.control.resources import HistoryRates
from heddle.control.systems import SystemSpec, system_spec
from heddle.policy.prediction import ContextAnswer, Predictor
from heddle.sim.config import SimConfig
from heddle.sim.on_workers import bundle_predictor, control_on_workers, run_control
from heddle.sim.planning import choose_system_plan
from heddle.sim.results import SimResult
from heddle.sim.simulator import ProgressCallback
from heddle.traces import TraceTrajectory


def simulate(
    trace: Sequence[TraceTrajectory],
    system: str | SystemSpec,
    config: SimConfig | None = None,
    *,
    history: Sequence[TraceTrajectory] = (),
    progress: ProgressCallback | None = None,
    tp_degrees: Sequence[int] | None = None,
    context: ContextAnswer | None = None,
    predictor: Predictor | None = None,
    concurrency_cap: CapSetting | None = None,
    overcommit: float | None = None,
) -> SimResult:
    """One rollout of ``trace`` under ``system`` (a registry name or a spec), on the workers
    of the bundle's resource plan, or on fixed workers of ``tp_degrees`` (a recorded cluster).
    ``context``: the context model, for ``config.predictor == "context"``; ``predictor``: a
    fresh predictor in place of the configured one (the plan check's ``cross_fitted``);
    ``concurrency_cap``: a baseline's cap, or the admission of a bundle with KV admission
    (None: the plan check's, or with ``tp_degrees`` the default); ``overcommit``: KV
    admission's (None: the plan check's, or the default)."""
    config = config or SimConfig()
    spec = system if isinstance(system, SystemSpec) else system_spec(system)
    control, tp_degrees = control_for(
        trace, spec, config, history, tp_degrees, context, predictor, concurrency_cap, overcommit
    )
    return run_control(trace, spec, config, control, tp_degrees, progress)


def control_for(
    trace: Sequence[TraceTrajectory],
    spec: SystemSpec,
    config: SimConfig,
    history: Sequence[TraceTrajectory] = (),
    tp_degrees: Sequence[int] | None = None,
    context: ContextAnswer | None = None,
    predictor: Predictor | None = None,
    concurrency_cap: CapSetting | None = None,
    overcommit: float | None = None,
) -> tuple[DeciderBundle, list[int]]:
    """A fresh control plane of ``spec`` for one rollout of ``trace`` and the TP degrees of its
    workers (``tp_degrees`` when given, else the bundle's plan checked on the history);
    ``context``, ``predictor``, ``concurrency_cap`` and ``overcommit`` as for ``simulate``."""
    predictor = bundle_predictor(trace, spec, config, history, context, predictor)
    rates = HistoryRates.of(history)
    if tp_degrees is None:
        ratio, tool_rate = rates.observation_ratio, rates.tool_s_per_token
        plan = choose_system_plan(trace, spec, config, predictor, history, ratio, tool_rate)
        tp_degrees = list(plan.tp_degrees)
        if concurrency_cap is None:
            concurrency_cap = plan.concurrency_cap
        if overcommit is None:
            overcommit = plan.overcommit
    control = control_on_workers(spec, config, rates, predictor, concurrency_cap, overcommit)
    return control, list(tp_degrees)
