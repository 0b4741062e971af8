"""Choosing the workers' TP degrees (and a baseline's concurrency cap) for a simulated rollout,
checked by simulation on the history.

The analytic plan (``plan_workers``: for Heddle the exact optimum of the placement objective per
subset of TP degrees, chosen among by the plan estimate of
``heddle.policy.resources.plan_estimate``; the best homogeneous degree by that estimate otherwise)
is pure, so the live control plane plans alike. With a history (the previous rollout), each
candidate, the analytic plan and every homogeneous configuration that fits, is first simulated
group by group on that history (``heddle.sim.profile``), with the bundle's engine and its way of
spreading trajectories (presorted groups, or an even split for routers), jobs ordered by length
for length-based priorities, by submission for FCFS, and tied (arrival order) otherwise. A bundle
with a fixed degree (Fix-1, Fix-8) keeps it.

The profile check cannot see what a bundle's control plane does while the rollout runs (KV
admission, migrations, re-balancing moves, a router's re-prefills, a concurrency cap,
ThunderAgent's pauses), so for every bundle alike the candidates it rates within
``SHORTLIST_SHARE`` of its best (at most ``SHORTLIST_SIZE``) are also simulated in full on the
history, the whole control plane included (``full_check_runs``; a predicting bundle's predictor
cross-fitted so that it never predicts a trajectory it learned from), and the profile's pick
gives way only to a plan the full simulation rates ``SWITCH_MARGIN`` faster: one sample of a
rollout is a noisy judge, and a plan that wins by less on it is as likely to lose on the next.
For a baseline with a concurrency control (``heddle.control.systems.ConcurrencyControl``) the plans
run with its code's default; then, if that run of the chosen plan evicted KV (else a cap could only
delay starts), that plan is also run with each other cap of ``heddle.sim.concurrency_caps``, and the
default gives way to one only past the same margin. A bundle with KV admission likewise runs its
chosen plan with each other admission setting of ``heddle.sim.admission_choice`` (other overcommits,
the static cap a baseline would get, none), whether or not anything was evicted (its admission holds
trajectories back so that little is), and keeps its default unless another is ``SWITCH_MARGIN``
faster. Where a cap or setting other than the default wins, the other shortlisted plans run under it
too (``replanned``), and the TP pick moves only past the same margin. So no system runs a
configuration slower on the previous rollout than the one its users start from, and each runs what
its users would pick with that rollout in hand.
Cost: at most ``SHORTLIST_SIZE`` simulations of the history per system, plus one per cap or
admission setting tried (docs/benchmarks.md, "Baselines at their real best", "Predictive
admission against a static cap").
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from heddle.control.bundle import CapSetting, engine_config
from heddle.control.placement import PlacementRequest, PresortedPlacer, WorkerInfo
from heddle.control.resources import (
    DEFAULT_OBSERVATION_RATIO,
    plan_tp_degrees,
    representative_context,
)
from heddle.control.systems import PRESORTED, SystemSpec
from heddle.policy.cost.model import TP_DEGREES
from heddle.policy.engine_models import engine_model
from heddle.policy.prediction import CONTEXT_PREDICTOR, Predictor, Progress
from heddle.policy.resources.plan_estimate import AgentShape
from heddle.policy.resources.problem import canonical
from heddle.sim.admission_choice import DEFAULT_OVERCOMMIT, admission_settings
from heddle.sim.concurrency_caps import cap_candidates
from heddle.sim.config import SimConfig
from heddle.sim.on_workers import cross_fitted, simulate_on_workers
from heddle.sim.profile import simulated_plan_makespan_s
from heddle.sim.results import SimResult
from heddle.sim.trajectories import build_trajectories
from heddle.traces import TraceTrajectory

Groups = list[list[TraceTrajectory]]

SHORTLIST_SHARE = 0.10
"""Candidates whose profile makespan is within this share of the best are checked in full."""
SHORTLIST_SIZE = 3
"""At most this many candidates (the profile's fastest) are checked in full."""
SWITCH_MARGIN = 0.02
"""The full check replaces the profile's pick only with a plan this much faster on the history
(docs/benchmarks.md, "The plan check simulates the control plane")."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What a system runs a rollout on: its workers' TP degrees and, for a bundle with a
    concurrency control, its cap; for one with KV admission, its admission (``concurrency_cap``:
    KV admission, a static cap or off) and KV admission's overcommit."""

    tp_degrees: tuple[int, ...]
    concurrency_cap: CapSetting = "default"
    overcommit: float = DEFAULT_OVERCOMMIT


def choose_workers(
    trace: Sequence[TraceTrajectory],
    spec: SystemSpec,
    config: SimConfig,
    predictor: Predictor | None,
    history: Sequence[TraceTrajectory] = (),
    observation_ratio: float = DEFAULT_OBSERVATION_RATIO,
    tool_s_per_token: float = 0.0,
) -> list[int]:
    """TP degree per worker: the analytic plan, or a faster candidate on the history."""
    plan = choose_system_plan(
        trace, spec, config, predictor, history, observation_ratio, tool_s_per_token
    )
    return list(plan.tp_degrees)


def choose_system_plan(
    trace: Sequence[TraceTrajectory],
    spec: SystemSpec,
    config: SimConfig,
    predictor: Predictor | None,
    history: Sequence[TraceTrajectory] = (),
    observation_ratio: float = DEFAULT_OBSERVATION_RATIO,
    tool_s_per_token: float = 0.0,
) -> Plan:
    """The analytic plan with the default cap, or a faster configuration on the history."""
    shape = AgentShape(
        observation_ratio,
        tool_s_per_token,
        max((float(t.num_output_tokens) for t in history), default=math.inf),
    )
    lengths = planning_lengths(trace, spec, predictor)
    analytic = plan_workers(
        trace, spec, config, predictor, observation_ratio, tool_s_per_token, shape, lengths=lengths
    )
    if not history or (spec.resources == "homogeneous" and spec.tp_degree):
        return Plan(tuple(analytic))
    candidates = [canonical(analytic)]
    for tp in TP_DEGREES:
        homogeneous = (tp,) * (config.num_gpus // tp)
        if homogeneous and homogeneous not in candidates:
            candidates.append(homogeneous)

    placed_by = _history_placement_lengths(trace, history, spec, predictor, lengths)

    def split(tp_degrees: Sequence[int]) -> Groups:
        if spec.placement == PRESORTED:
            return _presorted_groups(
                history, placed_by, tp_degrees, config, observation_ratio, tool_s_per_token
            )
        return _even_groups(history, len(tp_degrees))

    engine = replace(
        engine_config(spec, engine_model(config.engine_model)), max_running=config.max_running
    )
    priority = _PROFILE_PRIORITY.get(spec.priority, _equal)
    scores = [
        simulated_plan_makespan_s(split(tps), tps, config.cost_for_tp, engine, priority)
        for tps in candidates
    ]
    plans = [Plan(tuple(candidates[index])) for index in shortlisted(scores)]
    has_setting = spec.concurrency is not None or spec.admits
    if len(plans) < 2 and not has_setting:
        return plans[0]
    runs = full_check_runs(history, spec, config, plans)
    pick = switched_pick([run.makespan_s for run in runs])
    plan, run = plans[pick], runs[pick]
    if spec.admits:
        settings = admission_settings(plan.tp_degrees, config, trace, history)[1:]
        others = [Plan(plan.tp_degrees, s.cap, s.overcommit) for s in settings]
    elif run.num_evicted_tokens:
        caps = cap_candidates(spec, plan.tp_degrees, config, trace, history)[1:]
        others = [Plan(plan.tp_degrees, cap) for cap in caps]
    else:
        return plan  # nothing was evicted: a cap could only delay starts
    makespans = [run.makespan_s, *full_check_makespans(history, spec, config, others)]
    pick = switched_pick(makespans)
    chosen = [plan, *others][pick]
    if pick == 0:
        return chosen
    return replanned(history, spec, config, plans, chosen, makespans[pick])


def replanned(
    history: Sequence[TraceTrajectory],
    spec: SystemSpec,
    config: SimConfig,
    shortlist: Sequence[Plan],
    chosen: Plan,
    chosen_makespan_s: float,
) -> Plan:
    """``chosen``, or another shortlisted TP plan under the cap or admission setting ``chosen``
    runs, if that one is ``SWITCH_MARGIN`` faster on the history: a setting changes what each
    plan holds back, so the TP pick made under the default setting may no longer be the fastest
    (zoo cell 8: on 4 x TP2 under the default, then overcommit 1.0: 671 s; 2 x TP4 at
    overcommit 1.0: 605 s)."""
    rivals = [
        Plan(p.tp_degrees, chosen.concurrency_cap, chosen.overcommit)
        for p in shortlist
        if p.tp_degrees != chosen.tp_degrees
    ]
    if not rivals:
        return chosen
    makespans = [chosen_makespan_s, *full_check_makespans(history, spec, config, rivals)]
    return [chosen, *rivals][switched_pick(makespans)]


def shortlisted(scores: Sequence[float]) -> list[int]:
    """Indices of the candidates to check in full, the profile's fastest first (ties by index):
    those within ``SHORTLIST_SHARE`` of the best, at most ``SHORTLIST_SIZE``."""
    order = sorted(range(len(scores)), key=lambda index: (scores[index], index))
    limit = scores[order[0]] * (1 + SHORTLIST_SHARE)
    return [index for index in order if scores[index] <= limit][:SHORTLIST_SIZE]


def switched_pick(full_makespans: Sequence[float]) -> int:
    """Position of the plan to run among shortlisted candidates (the profile's pick first):
    the full check's fastest if it beats the profile's pick by ``SWITCH_MARGIN``, else 0."""
    fastest = min(range(len(full_makespans)), key=lambda index: (full_makespans[index], index))
    if full_makespans[fastest] < full_makespans[0] * (1 - SWITCH_MARGIN):
        return fastest
    return 0


def full_check_makespans(
    history: Sequence[TraceTrajectory],
    spec: SystemSpec,
    config: SimConfig,
    options: Sequence[Plan],
) -> list[float]:
    """The bundle's simulated makespan of the history on each option (``full_check_runs``)."""
    return [run.makespan_s for run in full_check_runs(history, spec, config, options)]


def full_check_runs(
    history: Sequence[TraceTrajectory],
    spec: SystemSpec,
    config: SimConfig,
    options: Sequence[Plan],
) -> list[SimResult]:
    """The bundle's simulated rollout of the history on each option, a predicting bundle's
    predictor cross-fitted on that history (``heddle.sim.on_workers.cross_fitted``: fitted
    in-sample, it would rank the history better than it ranks a new rollout; the context model
    is not asked, the online model stands in)."""
    if config.predictor == CONTEXT_PREDICTOR:
        config = replace(config, predictor="online")
    fitted = cross_fitted(history, config) if spec.uses_predictions else None
    return [
        simulate_on_workers(
            history,
            spec,
            config,
            list(option.tp_degrees),
            history=history,
            predictor=copy.deepcopy(fitted),
            concurrency_cap=option.concurrency_cap,
            overcommit=option.overcommit,
        )
        for option in options
    ]


def plan_workers(
    trace: Sequence[TraceTrajectory],
    spec: SystemSpec,
    config: SimConfig,
    predictor: Predictor | None,
    observation_ratio: float = DEFAULT_OBSERVATION_RATIO,
    tool_s_per_token: float = 0.0,
    shape: AgentShape | None = None,
    *,
    lengths: Sequence[float] | None = None,
) -> list[int]:
    """The TP degree of each worker under the bundle's resource mode; ``shape`` (learnt from
    history; default: the two ratios and default turns) feeds the plan estimate; ``lengths``:
    ``planning_lengths`` when the caller has them already."""
    if lengths is None:
        lengths = planning_lengths(trace, spec, predictor)
    prompts = [t.prompt_tokens for t in trace]
    context = representative_context(prompts, lengths, observation_ratio)
    return plan_tp_degrees(
        spec.resources,
        num_gpus=config.num_gpus,
        lengths=lengths,
        context_tokens=context,
        cost_for_tp=config.cost_for_tp,
        rng=random.Random(config.seed),
        tp_degree=spec.tp_degree,
        tool_s_per_token=tool_s_per_token,
        prompt_tokens=prompts,
        shape=shape or AgentShape(observation_ratio, tool_s_per_token),
    )


def planning_lengths(
    trace: Sequence[TraceTrajectory], spec: SystemSpec, predictor: Predictor | None
) -> list[float]:
    """The output lengths a bundle plans with, in trace order: a predicting bundle's first
    predictions (what its control plane knows at submission, whatever its resource mode, so
    that an ablation differs from Heddle only in what it ablates), the true lengths for the
    bundles that do not predict (a homogeneous plan only needs the workload's totals: generous
    to the baselines)."""
    if predictor is None:
        if spec.resources == "annealed":
            raise ValueError(f"system {spec.name!r}: an annealed plan needs a predictor")
        return [float(t.num_output_tokens) for t in trace]
    return [
        predictor.predict(Progress(t.traj_id, t.spec.group_id, t.trace.prompt_tokens))
        for t in build_trajectories(trace).values()
    ]


def _history_placement_lengths(
    trace: Sequence[TraceTrajectory],
    history: Sequence[TraceTrajectory],
    spec: SystemSpec,
    predictor: Predictor | None,
    lengths: Sequence[float] | None = None,
) -> list[float]:
    """What the presorted placer sorts the history by in the profile check: the lengths the
    live rollout is placed by, carried over to the same prompts. History trajectory ``i`` is
    the same prompt and sample index as trace trajectory ``i`` in another epoch, so it takes
    trace ``i``'s planning length (for the predicting bundles, a prediction, not the history's
    own outcome, which no placer knows in advance); a history of other prompts takes the mean
    planning length of its group in the trace, or its own length when its group is new."""
    if predictor is None:
        return [float(t.num_output_tokens) for t in history]
    if lengths is None:
        lengths = planning_lengths(trace, spec, predictor)
    if [t.group for t in trace] == [t.group for t in history]:
        return list(lengths)
    by_group: dict[str, list[float]] = {}
    for trajectory, length in zip(trace, lengths, strict=True):
        by_group.setdefault(trajectory.group, []).append(length)
    return [
        sum(by_group[t.group]) / len(by_group[t.group])
        if t.group in by_group
        else float(t.num_output_tokens)
        for t in history
    ]


def _presorted_groups(
    history: Sequence[TraceTrajectory],
    lengths: Sequence[float],
    tp_degrees: Sequence[int],
    config: SimConfig,
    observation_ratio: float,
    tool_s_per_token: float,
) -> Groups:
    """The history split as the presorted placer splits it, sorted by ``lengths``."""
    placer = PresortedPlacer(
        config.cost_for_tp,
        observation_ratio=observation_ratio,
        tool_s_per_token=tool_s_per_token,
    )
    requests = [
        PlacementRequest(str(index), length, t.prompt_tokens)
        for index, (t, length) in enumerate(zip(history, lengths, strict=True))
    ]
    workers = [WorkerInfo(f"w{index}", tp) for index, tp in enumerate(tp_degrees)]
    groups: dict[str, list[TraceTrajectory]] = {worker.worker_id: [] for worker in workers}
    for assignment in placer.place(requests, workers):
        groups[assignment.worker_id].append(history[int(assignment.traj_id)])
    return list(groups.values())


def _even_groups(history: Sequence[TraceTrajectory], num_workers: int) -> Groups:
    """What load-balancing routers do with a batch submitted at once: turns about."""
    return [list(history[worker::num_workers]) for worker in range(num_workers)]


def _length_first(index: int, trajectory: TraceTrajectory) -> float:
    return float(trajectory.num_output_tokens)


def _length_last(index: int, trajectory: TraceTrajectory) -> float:
    return -float(trajectory.num_output_tokens)


def _submission_order(index: int, trajectory: TraceTrajectory) -> float:
    return -float(index)


def _equal(index: int, trajectory: TraceTrajectory) -> float:
    """Ties, ordered by arrival: round robin, and PLAS while nothing has been served yet."""
    return 0.0


_PROFILE_PRIORITY = {"pps": _length_first, "spf": _length_last, "fcfs": _submission_order}
