"""Choosing the workers' TP degrees for a simulated rollout, checked by profile simulation.

The analytic plan (``plan_workers``: annealing over the placement objective for
Heddle, the best homogeneous degree by that objective otherwise) prices a configuration with a
closed-form interference factor. With a history (the previous rollout of the same prompts),
each candidate, the analytic plan and every homogeneous configuration that fits, is also
simulated group by group on that history (``heddle.sim.profile``), with the bundle's engine
and its way of spreading trajectories (presorted groups, or an even split for routers), jobs
ordered by length for length-based priorities, by submission for FCFS, and tied (arrival
order) otherwise; the
fastest wins, the analytic plan on ties. So Heddle's plan is never worse than Fix-k on the
previous rollout, and every homogeneous baseline runs on its best degree for the workload.
A bundle with a fixed degree (Fix-1, Fix-8) keeps it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from heddle.control.placers import PlacementRequest, PresortedPlacer, WorkerInfo
from heddle.control.resources import (
    DEFAULT_OBSERVATION_RATIO,
    plan_tp_degrees,
    representative_context,
)
from heddle.control.systems import PRESORTED, SystemSpec, engine_config
from heddle.policy.cost_model import TP_DEGREES
from heddle.policy.engine_models import engine_model
from heddle.policy.predictors import Predictor, Progress
from heddle.policy.resources import canonical
from heddle.sim.config import SimConfig
from heddle.sim.profile import plan_makespan_s
from heddle.sim.simulator import build_trajectories
from heddle.traces import TraceTrajectory

Groups = list[list[TraceTrajectory]]


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
    analytic = plan_workers(trace, spec, config, predictor, observation_ratio, tool_s_per_token)
    if not history or (spec.resources == "homogeneous" and spec.tp_degree):
        return analytic
    candidates = [canonical(analytic)]
    for tp in TP_DEGREES:
        homogeneous = (tp,) * (config.num_gpus // tp)
        if homogeneous and homogeneous not in candidates:
            candidates.append(homogeneous)

    def split(tp_degrees: Sequence[int]) -> Groups:
        if spec.placement == PRESORTED:
            return _presorted_groups(
                history, tp_degrees, config, observation_ratio, tool_s_per_token
            )
        return _even_groups(history, len(tp_degrees))

    engine = replace(
        engine_config(spec, engine_model(config.engine_model)), max_running=config.max_running
    )
    priority = _PROFILE_PRIORITY.get(spec.priority, _equal)
    scores = [
        plan_makespan_s(split(tps), tps, config.cost_for_tp, engine, priority) for tps in candidates
    ]
    best = min(range(len(candidates)), key=lambda index: (scores[index], index))
    return list(candidates[best])


def plan_workers(
    trace: Sequence[TraceTrajectory],
    spec: SystemSpec,
    config: SimConfig,
    predictor: Predictor | None,
    observation_ratio: float = DEFAULT_OBSERVATION_RATIO,
    tool_s_per_token: float = 0.0,
) -> list[int]:
    """The TP degree of each worker under the bundle's resource mode."""
    trajectories = build_trajectories(trace)
    if spec.resources == "annealed":
        if predictor is None:
            raise ValueError(f"system {spec.name!r}: an annealed plan needs a predictor")
        lengths = [
            predictor.predict(Progress(t.traj_id, t.spec.group_id, t.trace.prompt_tokens))
            for t in trajectories.values()
        ]
    else:
        lengths = [float(t.num_output_tokens) for t in trace]
    context = representative_context([t.prompt_tokens for t in trace], lengths, observation_ratio)
    return plan_tp_degrees(
        spec.resources,
        num_gpus=config.num_gpus,
        lengths=lengths,
        context_tokens=context,
        cost_for_tp=config.cost_for_tp,
        rng=random.Random(config.seed),
        tp_degree=spec.tp_degree,
        tool_s_per_token=tool_s_per_token,
    )


def _presorted_groups(
    history: Sequence[TraceTrajectory],
    tp_degrees: Sequence[int],
    config: SimConfig,
    observation_ratio: float,
    tool_s_per_token: float,
) -> Groups:
    placer = PresortedPlacer(
        config.cost_for_tp,
        observation_ratio=observation_ratio,
        tool_s_per_token=tool_s_per_token,
    )
    requests = [
        PlacementRequest(str(index), float(t.num_output_tokens), t.prompt_tokens)
        for index, t in enumerate(history)
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
