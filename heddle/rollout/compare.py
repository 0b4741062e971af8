"""``heddle rollout compare``: the same trace under several policies, live, side by side with the
simulator's prediction for the same trace and cluster.

Fairness: every policy gets a fresh run of everything that holds state: its own control plane
(own durables, and ``since`` = the stream's end, so it learns nothing from the other policies'
runs; the predictor starts from the same history), fresh worker processes (empty engine caches)
and fresh tool executors. With ``num_gpus`` each policy runs on its own resource plan, the one
the simulator chooses for it (``heddle.sim.simulate``: annealed TP degrees for Heddle, the best
homogeneous degree for the baselines), exactly as ``heddle sim compare`` does; with a fixed
``WorkerPool`` every policy runs on the same workers.

Ratios are of the first policy's throughput over each other's (output tokens per model second of
makespan; model time = wall time x time scale), live and simulated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec

from heddle.bus import Bus, BusOptions
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig
from heddle.errors import UserError
from heddle.rollout.deployment import WorkerPool, delete_control_durables
from heddle.rollout.driver import RolloutResult, RunOptions, run_rollout
from heddle.rollout.sources import Source
from heddle.rollout.submission import RolloutPlan
from heddle.traces import write_trace


@dataclass(frozen=True, slots=True)
class CompareOptions:
    policies: list[str]
    source: Source
    pool: WorkerPool
    """Engine and options of every run; its TP degrees are replaced by each policy's plan when
    ``num_gpus`` is set."""
    control_plane: ControlPlaneConfig = field(default_factory=ControlPlaneConfig)
    num_gpus: int | None = None
    num_tool_executors: int = 1
    time_scale: float = 1.0
    timeout_s: float | None = None
    simulate: bool = True
    """Also simulate each policy on the same trace (needs a trace, not real tasks)."""
    show_progress: bool = True


@dataclass(frozen=True, slots=True)
class PolicyRun:
    policy: str
    tp_degrees: list[int]
    live: RolloutResult
    simulated: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class CompareResult:
    source: str
    num_trajectories: int
    runs: list[PolicyRun]

    def ratios(self, pick: Callable[[PolicyRun], float | None]) -> dict[str, float]:
        """Throughput of the first policy over each other's, by ``pick``."""
        first = self.runs[0]
        base = pick(first)
        ratios = {}
        for run in self.runs[1:]:
            value = pick(run)
            if base and value:
                ratios[f"{first.policy}_over_{run.policy}"] = base / value
        return ratios

    def to_json(self) -> dict[str, Any]:
        live = self.ratios(lambda run: run.live.summary.throughput_tok_s)
        simulated = self.ratios(
            lambda run: run.simulated["throughput_tok_s"] if run.simulated else None
        )
        return {
            "source": self.source,
            "num_trajectories": self.num_trajectories,
            "makespan_unit": "model seconds (wall x time_scale)",
            "policies": {
                run.policy: {
                    "tp_degrees": run.tp_degrees,
                    "live": run.live.to_json(),
                    "simulated": run.simulated,
                }
                for run in self.runs
            },
            "throughput_ratios": live,
            "simulated_throughput_ratios": simulated,
        }


def check_policies(policies: Sequence[str]) -> list[str]:
    from heddle.control.systems import SYSTEMS

    names = list(dict.fromkeys(name.strip() for name in policies if name.strip()))
    if len(names) < 2:
        raise UserError("--policies needs at least two policies, e.g. heddle,slime,verl")
    unknown = [name for name in names if name not in SYSTEMS]
    if unknown:
        raise UserError(f"unknown policy {unknown[0]!r}; choose from {', '.join(SYSTEMS)}")
    return names


async def compare_policies(settings: Settings, options: CompareOptions) -> CompareResult:
    source = options.source
    if (options.num_gpus or options.simulate) and not source.trace:
        raise UserError("--gpus and the simulated reference need a trace or a workload, not tasks")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base_dir = settings.data_dir / "compare" / stamp
    base_dir.mkdir(parents=True, exist_ok=True)
    history_path = _write_history(base_dir, source)
    runs: list[PolicyRun] = []
    async with Bus(settings, BusOptions(name="heddle-compare")) as bus:
        for index, policy in enumerate(options.policies):
            simulated, tp_degrees = _simulate(options, policy)
            prefix = f"cmp{stamp.replace('-', '')}-{index}"
            since = (await bus.stream_state()).last_sequence + 1
            host = replace(options.control_plane.host, durable_prefix=prefix, since_sequence=since)
            control = replace(
                options.control_plane,
                learn_from_ledger=False,
                history=(history_path,) if history_path else (),
                host=host,
            )
            pool = replace(options.pool, num_workers=len(tp_degrees), tp_degrees=tuple(tp_degrees))
            plan = RolloutPlan(policy, source.specs, source.label, options.time_scale)
            run_options = RunOptions(
                plan=plan,
                pool=pool,
                num_tool_executors=options.num_tool_executors,
                control_plane=control,
                timeout_s=options.timeout_s,
                show_progress=options.show_progress,
                log_dir=base_dir / policy,
            )
            try:
                live = await run_rollout(settings, run_options)
            finally:
                await delete_control_durables(bus, prefix)
            runs.append(PolicyRun(policy, tp_degrees, live, simulated))
    return CompareResult(source.label, len(source.specs), runs)


def _simulate(options: CompareOptions, policy: str) -> tuple[dict[str, Any] | None, list[int]]:
    """The simulator's result for ``policy`` and the TP degrees the live run uses."""
    fixed = _fixed_degrees(options.pool)
    if not options.simulate and options.num_gpus is None:
        return None, fixed
    from heddle.sim import SimConfig, simulate

    control = options.control_plane
    predictor = control.predictor
    config = SimConfig(
        model=control.cost_model,
        hardware=control.hardware,
        num_gpus=options.num_gpus or sum(fixed),
        seed=control.seed,
        predictor=predictor.name,
        predictor_sigma=predictor.sigma,
    )
    result = simulate(
        options.source.trace,
        policy,
        config,
        history=options.source.history,
        tp_degrees=None if options.num_gpus else fixed,
    )
    summary: dict[str, Any] = msgspec.to_builtins(result.summary())
    return summary, list(result.tp_degrees)


def plan_pool(
    pool: WorkerPool, source: Source, policy: str, control: ControlPlaneConfig, num_gpus: int
) -> WorkerPool:
    """``pool`` on the resource plan the simulator chooses for ``policy`` and ``num_gpus``."""
    options = CompareOptions([policy], source, pool, control, num_gpus=num_gpus, simulate=False)
    _, degrees = _simulate(options, policy)
    return replace(pool, num_workers=len(degrees), tp_degrees=tuple(degrees))


def _fixed_degrees(pool: WorkerPool) -> list[int]:
    if pool.tp_degrees:
        return list(pool.tp_degrees)
    tp = int(dict(pool.engine_options).get("tp", "1"))
    return [tp] * pool.num_workers


def _write_history(base_dir: Path, source: Source) -> Path | None:
    if not source.history:
        return None
    path = base_dir / "history.jsonl"
    write_trace(path, source.history)
    return path
