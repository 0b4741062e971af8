"""How well the plan estimate ranks resource plans: estimate vs simulated makespan per plan.

For a workload and a GPU budget, the planner's candidate plans
(``heddle.policy.resources.plan_choice``: the best cover of every subset of TP degrees, homogeneous
ones included) are each simulated under the Heddle bundle on fixed workers (``simulate(...,
tp_degrees=plan)``). The study reports each plan's estimate, simulated makespan and their ratio, the
Spearman rank correlation of the two, and how the chosen plan (lowest estimate) fares against the
best simulated candidate and the best homogeneous one. The estimate sees what the planner sees: the
predictor's first predictions and ratios learnt from a history rollout (another epoch of the same
prompts).

``SWE_LIKE`` is the long-tool workload the catalog lacks: SWE agent episodes of up to 150 turns
whose test runs take minutes (``heddle bench annealing --validate`` runs it with the catalog's).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.control.resources import (
    AgenticCostModel,
    observation_ratio,
    representative_context,
    tool_s_per_token,
)
from heddle.policy.cost.model import TP_DEGREES
from heddle.policy.prediction import Progress
from heddle.policy.resources.plan_choice import candidate_plans, choose_plan
from heddle.policy.resources.plan_estimate import AgentShape
from heddle.policy.resources.problem import ResourceProblem
from heddle.sim.config import SimConfig
from heddle.sim.on_workers import make_simulation_predictor
from heddle.sim.run import simulate
from heddle.sim.trajectories import build_trajectories
from heddle.traces import TraceTrajectory
from heddle.workloads import (
    LogNormal,
    ToolModel,
    TurnModel,
    WorkloadSpec,
    generate_from_spec,
    workload_spec,
)

SWE_LIKE = WorkloadSpec(
    name="swe-like",
    description="SWE agent with long test runs: up to 150 turns, tests of minutes",
    prompt_tokens=LogNormal.from_median_p90(3000, 6000),  # as coding: schemas + an issue
    # assumption: longer episodes than coding's DeepSWE cap (SWE-rebench averages 64 turns).
    turns=TurnModel(body=LogNormal(25, 0.6), max_turns=150),
    output_tokens=LogNormal.from_median_p90(250, 250 * 13 / 7),  # coding's turns
    first_turn_factor=2.0,
    output_effort_exponent=0.75,
    max_output_tokens_per_turn=8192,
    max_response_tokens=32768,
    tool_output_tokens=LogNormal.from_median_p90(400, 2500),
    max_tool_output_tokens=4096,
    tools=(
        ToolModel("shell", 0.6, LogNormal.from_range(0.5, 10), max_time_s=120),
        # assumption: a test suite of 10 s to 4 minutes, cut at 10 minutes.
        ToolModel("tests", 0.4, LogNormal.from_range(10, 240), max_time_s=600),
    ),
    group_size=8,
)


@dataclass(frozen=True, slots=True)
class PlanRow:
    tp_degrees: list[int]
    estimate_s: float
    simulated_s: float

    @property
    def ratio(self) -> float:
        return self.estimate_s / self.simulated_s


@dataclass(frozen=True, slots=True)
class Validation:
    workload: str
    num_gpus: int
    num_trajectories: int
    rows: list[PlanRow]
    chosen: list[int]

    @property
    def rank_correlation(self) -> float:
        """Spearman's rho of estimates and simulated makespans (nan for < 3 plans)."""
        return spearman([r.estimate_s for r in self.rows], [r.simulated_s for r in self.rows])

    def summary(self) -> dict[str, object]:
        chosen = next(r for r in self.rows if r.tp_degrees == self.chosen)
        best = min(self.rows, key=lambda r: r.simulated_s)
        homogeneous = [r for r in self.rows if len(set(r.tp_degrees)) == 1]
        best_fix = min(homogeneous, key=lambda r: r.simulated_s)
        return {
            "workload": self.workload,
            "gpus": self.num_gpus,
            "n": self.num_trajectories,
            "plans": [
                {
                    "tp_degrees": r.tp_degrees,
                    "estimate_s": round(r.estimate_s, 1),
                    "simulated_s": round(r.simulated_s, 1),
                    "ratio": round(r.ratio, 3),
                }
                for r in self.rows
            ],
            "rank_correlation": round(self.rank_correlation, 3),
            "chosen": self.chosen,
            "chosen_simulated_s": round(chosen.simulated_s, 1),
            "best_simulated": best.tp_degrees,
            "best_simulated_s": round(best.simulated_s, 1),
            "chosen_over_best": round(chosen.simulated_s / best.simulated_s, 3),
            "best_homogeneous": best_fix.tp_degrees,
            "chosen_over_best_homogeneous": round(chosen.simulated_s / best_fix.simulated_s, 3),
        }


def validate(workload: str, num_trajectories: int, config: SimConfig, seed: int = 0) -> Validation:
    """Estimate and simulate every candidate plan of ``workload`` (a catalog name or
    ``"swe-like"``) on ``config.num_gpus`` GPUs."""
    spec = SWE_LIKE if workload == SWE_LIKE.name else workload_spec(workload)
    trace = generate_from_spec(spec, num_trajectories, seed)
    history = generate_from_spec(spec, num_trajectories, seed, epoch=1)
    return validate_trace(workload, trace, history, config)


def validate_trace(
    label: str,
    trace: Sequence[TraceTrajectory],
    history: Sequence[TraceTrajectory],
    config: SimConfig,
) -> Validation:
    """Estimate and simulate every candidate plan of a rollout ``trace`` whose previous epoch
    is ``history``, on ``config`` (its GPUs, engine model, predictor and KV)."""
    shape = learnt_shape(history)
    predictor = make_simulation_predictor(trace, config, history)
    lengths = [
        predictor.predict(Progress(t.traj_id, t.spec.group_id, t.trace.prompt_tokens))
        for t in build_trajectories(trace).values()
    ]
    prompts = [t.prompt_tokens for t in trace]
    context = representative_context(prompts, lengths, shape.observation_ratio)
    models = {
        tp: AgenticCostModel(config.cost_for_tp(tp), shape.tool_s_per_token) for tp in TP_DEGREES
    }
    problem = ResourceProblem(lengths, config.num_gpus, models, context)
    candidates = candidate_plans(problem, prompts, config.cost_for_tp, shape)
    rows = [
        PlanRow(
            c.plan.tp_degrees,
            c.estimate_s,
            simulate(
                trace, "heddle", config, history=history, tp_degrees=c.plan.tp_degrees
            ).makespan_s,
        )
        for c in candidates
    ]
    chosen = choose_plan(candidates).plan.tp_degrees
    return Validation(label, config.num_gpus, len(trace), rows, chosen)


def learnt_shape(history: Sequence[TraceTrajectory]) -> AgentShape:
    """The planner's ratios from completed trajectories (as ``heddle.sim.run`` learns them)."""
    observations = [
        (t.num_output_tokens, sum(s.tool_output_tokens for s in t.steps[:-1])) for t in history
    ]
    return AgentShape(
        observation_ratio(observations),
        tool_s_per_token([(t.num_output_tokens, t.tool_s) for t in history]),
        max((float(t.num_output_tokens) for t in history), default=math.inf),
    )


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties; nan below 3 points or no spread)."""
    if len(xs) != len(ys):
        raise ValueError("spearman needs equally long sequences")
    if len(xs) < 3:
        return float("nan")
    rx, ry = _ranks(xs), _ranks(ys)
    if len(set(rx)) == 1 or len(set(ry)) == 1:
        return float("nan")
    return statistics.correlation(rx, ry)


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2
        start = end + 1
    return ranks
