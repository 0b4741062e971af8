"""Live-system fidelity: the same trace and policy run live (sim engines, time-scaled) and in the
simulator, on the same cluster; their makespans (model seconds) and ratio.

The live run is the main job's ``run_rollout`` (control plane, worker agents and tool executors
as child processes over NATS, exactly as ``heddle rollout run``); the simulated one is
``heddle.sim.simulate`` with the workers' model, GPU kind and TP degrees and the same predictor.
The live system lags the simulator by its real overheads: control-plane latency, NATS hops and
the sim engines' timer lateness, each multiplied by the time scale in model time.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import msgspec

from heddle.bench.fidelity.gaps import GapStats, step_gaps
from heddle.bus import Bus, BusOptions
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.replay import replay_query
from heddle.rollout.driver import RolloutResult, RunOptions, run_rollout
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.rollout.worker_pool import WorkerPool, default_workers_per_process
from heddle.sim import SimConfig, SimResult, simulate
from heddle.workloads import generate


@dataclass(frozen=True, slots=True)
class FidelityOptions:
    workload: str = "coding"
    num_trajectories: int = 64
    seed: int = 0
    policy: str = "heddle"
    num_workers: int = 4
    tp_degree: int = 1
    model: str = "qwen3-8b"
    hardware: str = "h200"
    time_scale: float = 10.0
    """Model seconds per wall second of the live sim engines. Every wall millisecond a step
    loses to messaging costs ``time_scale`` model milliseconds: on the 2-core development VM,
    10x stays within 10% of the simulator, 50x does not (docs/benchmarks.md)."""
    predictor: str = "oracle"
    """Live and simulated predictor (``oracle``: both know the trace, so both plan alike)."""
    num_tool_executors: int = 2
    timeout_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.num_trajectories < 1 or self.num_workers < 1 or not self.time_scale > 0:
            raise ValueError("need trajectories >= 1, workers >= 1 and time_scale > 0")


@dataclass(frozen=True, slots=True)
class FidelityResult:
    options: FidelityOptions
    live: RolloutResult
    simulated: SimResult
    live_wall_s: float
    gaps: GapStats
    """Where the live run spent wall time the simulator does not model."""

    @property
    def ratio(self) -> float:
        """Live makespan over simulated makespan (1.0: a perfect match)."""
        return self.live.summary.makespan_s / self.simulated.makespan_s

    def to_json(self) -> dict[str, Any]:
        live = self.live.summary
        return {
            "options": asdict(self.options),
            "makespan_unit": "model seconds (wall x time_scale)",
            "live": {
                "rollout_id": live.rollout_id,
                "makespan_s": live.makespan_s,
                "wall_s": live.wall_s,
                "throughput_tok_s": live.throughput_tok_s,
                "num_completed": live.num_completed,
                "num_preemptions": live.num_preemptions,
                "num_migrations": live.num_migrations,
                "slowest": msgspec.to_builtins(live.slowest),
                "lag": msgspec.to_builtins(live.lag),
            },
            "simulated": self.simulated.summary(),
            "live_over_simulated": self.ratio,
            "live_overheads": self.gaps.to_json(),
            "target": "live within 10% of the simulator",
            "meets_target": abs(self.ratio - 1.0) <= 0.10,
        }


def simulated_reference(options: FidelityOptions) -> SimResult:
    trace = generate(options.workload, options.num_trajectories, options.seed)
    config = SimConfig(
        model=options.model,
        hardware=options.hardware,
        num_gpus=options.num_workers * options.tp_degree,
        seed=options.seed,
        predictor=options.predictor,
    )
    degrees = [options.tp_degree] * options.num_workers
    return simulate(trace, options.policy, config, tp_degrees=degrees)


async def measure_fidelity(settings: Settings, options: FidelityOptions) -> FidelityResult:
    """Run the live rollout on ``settings`` (a fresh data dir), then the simulation."""
    trace = generate(options.workload, options.num_trajectories, options.seed)
    plan = RolloutPlan(
        options.policy, trace_specs(trace), f"workload:{options.workload}", options.time_scale
    )
    pool = WorkerPool(
        options.num_workers,
        "sim",
        {
            "model": options.model,
            "hardware": options.hardware,
            "tp": str(options.tp_degree),
            "time-scale": str(options.time_scale),
        },
        workers_per_process=default_workers_per_process("sim"),
    )
    control = ControlPlaneConfig(
        cost_model=options.model,
        hardware=options.hardware,
        predictor=PredictorConfig(name=options.predictor, seed=options.seed),
        learn_from_ledger=False,
    )
    run = RunOptions(
        plan=plan,
        pool=pool,
        num_tool_executors=options.num_tool_executors,
        control_plane=control,
        timeout_s=options.timeout_s,
        show_progress=False,
    )
    # This bus holds the embedded server for the run and the reading of its events afterwards.
    async with Bus(settings, BusOptions(name="heddle-bench-fidelity")) as bus:
        started = time.perf_counter()
        live = await run_rollout(settings, run)
        wall_s = time.perf_counter() - started
        records = bus.replay_events(replay_query(live.rollout_id))
        gaps = step_gaps([record.message async for record in records])
    return FidelityResult(options, live, simulated_reference(options), wall_s, gaps)
