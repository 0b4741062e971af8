"""Live against simulated on a real engine under KV pressure: the torch engine and engine model
``torch`` (``heddle.policy.engine_models``), policy by policy.

One run, three parts per policy, on this machine:

1. *Profile*: the torch engine is measured by ``heddle bench engine`` in as many processes at
   once as there are workers (``measure_profile``), just before and just after the live run;
   the profile written is the median of those measurements, its KV capacity the budget the
   workers run under.
2. *Live*: the same trace (``heddle.bench.fidelity.engine_trace``) runs through
   ``heddle rollout run``'s machinery (control plane, tool executors and ``torch``-engine worker
   agents as child processes over NATS) in real time (time scale 1), every worker under
   ``--max-kv-tokens = kv_budget_tokens``.
3. *Simulated*: the simulator replays the trace on the same workers with engine model ``torch``,
   its engines costed by the profile of part 1 and its control plane built with the live control
   plane's options (the same cost-model preset and predictor), so only the engines' model
   stands between the two.

The figures compared are the makespan (seconds; wall time live) and the tokens prefilled again
(evicted prefixes, preemptions that lost KV).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from heddle.bench.fidelity.engine_options import EngineFidelityOptions
from heddle.bench.fidelity.engine_profile import measure_profile, write_combined
from heddle.config import Settings
from heddle.control import build_bundle, system_spec
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.controlplane.control_options import control_options
from heddle.policy.cost.model import CostModel
from heddle.policy.cost.profiles import ProfiledCostModel, parse_profile
from heddle.rollout.deployment import WorkerPool
from heddle.rollout.driver import RolloutResult, RunOptions, run_rollout
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.sim import SimConfig
from heddle.sim.on_workers import make_simulation_predictor
from heddle.sim.results import SimResult, summarise
from heddle.sim.simulator import Simulator
from heddle.traces import TraceTrajectory

MAKESPAN_TOLERANCE = 0.15
RECOMPUTE_TOLERANCE = 0.25


@dataclass(frozen=True, slots=True)
class PolicyFidelity:
    policy: str
    live: RolloutResult
    simulated: SimResult
    profile: dict[str, Any]
    """The engine profile measured just before the live run, which the simulation ran on."""

    def to_json(self) -> dict[str, Any]:
        live, sim = self.live.summary, self.simulated
        return {
            "live_makespan_s": live.makespan_s,
            "sim_makespan_s": sim.makespan_s,
            "makespan_ratio": live.makespan_s / sim.makespan_s,
            "live_recomputed_tokens": live.recomputed_tokens,
            "sim_recomputed_tokens": sim.num_recomputed_tokens,
            "recomputed_ratio": _ratio(live.recomputed_tokens, sim.num_recomputed_tokens),
            "live_preemptions": live.num_preemptions,
            "sim_preemptions": sim.num_preemptions,
            "live_migrations": live.num_migrations,
            "sim_migrations": sim.num_migrations,
            "live_completed": live.num_completed,
            "live_wall_s": live.wall_s,
            "profile": self.profile,
        }


@dataclass(frozen=True, slots=True)
class EngineFidelityResult:
    options: EngineFidelityOptions
    runs: list[PolicyFidelity]
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        policies = {run.policy: run.to_json() for run in self.runs}
        live_order = sorted(policies, key=lambda name: policies[name]["live_makespan_s"])
        sim_order = sorted(policies, key=lambda name: policies[name]["sim_makespan_s"])
        trace = self.options.trace()
        return {
            "engine": "torch",
            "engine_model": "torch",
            "options": {**asdict(self.options), "policies": list(self.options.policies)},
            "trace": {
                "num_trajectories": len(trace),
                "kv_footprint_tokens": sum(t.num_context_tokens for t in trace),
                "kv_capacity_tokens": self.options.kv_budget_tokens * self.options.num_workers,
            },
            "policies": policies,
            "live_order": live_order,
            "sim_order": sim_order,
            "meets_targets": {
                "makespan_within_15pct": all(
                    abs(p["makespan_ratio"] - 1) <= MAKESPAN_TOLERANCE for p in policies.values()
                ),
                "recomputed_within_25pct": all(
                    abs(p["recomputed_ratio"] - 1) <= RECOMPUTE_TOLERANCE for p in policies.values()
                ),
                "same_ordering": live_order == sim_order,
                "memory_bound": any(p["live_recomputed_tokens"] > 0 for p in policies.values()),
            },
            "wall_s": self.wall_s,
        }


def _ratio(live: int, sim: int) -> float:
    """live / sim; 1.0 when both are 0 (nothing to recompute either way)."""
    if sim == 0:
        return 1.0 if live == 0 else float("inf")
    return live / sim


async def measure_engine_fidelity(
    data_dir: Path, options: EngineFidelityOptions
) -> EngineFidelityResult:
    """For each policy: profile the engine, run live, simulate on the profile (module
    docstring). Each policy gets its own data dir under ``data_dir`` (its own embedded NATS
    and ledger) holding its profile (``profiles/torch-<model>.json``)."""
    started = time.perf_counter()
    trace = options.trace()
    runs = []
    for policy in options.policies:
        policy_dir = data_dir / policy
        profile_path = policy_dir / "profiles" / f"torch-{Path(options.model).name}.json"
        # Measured before and after the live run, so the profile brackets the load it ran under.
        measured = await measure_profile(options, profile_path, round_name="before")
        live = await run_live(Settings(data_dir=policy_dir), options, policy, trace)
        measured += await measure_profile(options, profile_path, round_name="after")
        profile = write_combined(measured, profile_path, options.kv_budget_tokens)
        cost = parse_profile(json.dumps(profile), "json", source=str(profile_path)).cost_model(1)
        simulated = simulate_on_profile(options, policy, cost)
        runs.append(PolicyFidelity(policy, live, simulated, profile))
    return EngineFidelityResult(options, runs, time.perf_counter() - started)


async def run_live(
    settings: Settings, options: EngineFidelityOptions, policy: str, trace: list[TraceTrajectory]
) -> RolloutResult:
    pool = WorkerPool(
        options.num_workers,
        "torch",
        {
            "model": options.model,
            "max-kv-tokens": str(options.kv_budget_tokens),
            "max-running": str(options.max_running),
            "num-threads": str(options.num_threads),
            "seed": str(options.seed),
        },
    )
    run = RunOptions(
        plan=RolloutPlan(policy, trace_specs(trace), "engine-trace", 1.0),
        pool=pool,
        num_tool_executors=options.num_tool_executors,
        control_plane=live_control_plane(options),
        timeout_s=options.timeout_s,
        show_progress=False,
    )
    return await run_rollout(settings, run)


def live_control_plane(options: EngineFidelityOptions) -> ControlPlaneConfig:
    return ControlPlaneConfig(
        cost_model=options.control_model,
        hardware="h200",
        predictor=PredictorConfig(name=options.predictor, seed=options.seed),
        learn_from_ledger=False,
    )


@dataclass(frozen=True, slots=True)
class ProfiledSimConfig(SimConfig):
    """A ``SimConfig`` whose engines are costed by a measured profile (every TP degree)."""

    engine_cost: ProfiledCostModel | None = None

    def cost_for_tp(self, tp_degree: int) -> CostModel:
        if self.engine_cost is None:
            return SimConfig.cost_for_tp(self, tp_degree)
        return self.engine_cost


def simulate_on_profile(
    options: EngineFidelityOptions, policy: str, engine_cost: ProfiledCostModel
) -> SimResult:
    """The trace under ``policy`` on ``num_workers`` TP1 workers: engines on the profile with
    engine model ``torch``, the control plane as the live one is built
    (``heddle.controlplane.control_options``)."""
    trace = options.trace()
    live = live_control_plane(options)
    config = ProfiledSimConfig(
        model=live.cost_model,
        hardware=live.hardware,
        num_gpus=options.num_workers,
        engine_model="torch",
        seed=options.seed,
        predictor=options.predictor,
        max_running=options.max_running,
        engine_cost=engine_cost,
    )
    spec = system_spec(policy)
    shared = control_options(live.cost_model, live.hardware, seed=options.seed, transfer_kv=True)
    predictor = make_simulation_predictor(trace, config) if spec.uses_predictions else None
    control = build_bundle(spec, dataclasses.replace(shared, predictor=predictor))
    degrees = [1] * options.num_workers
    run = Simulator(trace, control, degrees, config).run(None)
    return summarise(spec.name, run, degrees, lower_bound_s=0.0)
