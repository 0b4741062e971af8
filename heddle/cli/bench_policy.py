"""`heddle bench placement` and `heddle bench annealing`: the policy core's benchmarks.

Both time pure-Python policy code side by side in one process (medians of repetitions) and
print one JSON object with ``--json``, a table otherwise. Lengths are the output tokens of a
synthetic workload (``heddle.workloads``), so the figures are reproducible from the flags.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from heddle.cli.apps import bench_app
from heddle.errors import UserError
from heddle.policy.annealing import anneal
from heddle.policy.cost_model import HARDWARE, MODELS, TP_DEGREES, preset
from heddle.policy.migration import MigrationPlanner, shares_from_partition
from heddle.policy.placement import Partition, partition, partition_reference
from heddle.policy.resources import (
    ResourceProblem,
    all_configurations,
    exhaustive_search,
    fixed_configuration,
)
from heddle.workloads import generate, workload_names

T = TypeVar("T")


def _positive(value: int, flag: str) -> int:
    if value < 1:
        raise UserError(f"{flag} must be >= 1, got {value}")
    return value


def _workload_lengths(workload: str, num: int, seed: int) -> tuple[list[float], float]:
    """Output tokens per trajectory and a representative context (mean prompt + half the mean
    output: a sequence's context halfway through its decoding)."""
    if workload not in workload_names():
        raise UserError(f"unknown workload {workload!r}; choose one of {workload_names()}")
    trace = generate(workload, num, seed)
    lengths = [float(t.num_output_tokens) for t in trace]
    context = statistics.fmean(t.prompt_tokens for t in trace) + statistics.fmean(lengths) / 2
    return lengths, context


def _timed(function: Callable[[], T], repeats: int) -> tuple[T, float]:
    """The last result and the median wall time in milliseconds."""
    times: list[float] = []
    result: T | None = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append((time.perf_counter() - start) * 1000.0)
    assert result is not None  # repeats >= 1
    return result, statistics.median(times)


class LinearInterference:
    """F(b) = 1 + slope * (b - 1), infinite beyond ``max_batch`` (0: no cap)."""

    def __init__(self, slope: float, max_batch: int) -> None:
        self.slope = slope
        self.max_batch = max_batch

    def __call__(self, size: int) -> float:
        if self.max_batch and size > self.max_batch:
            return math.inf
        return 1.0 + self.slope * (size - 1)


@bench_app.command("placement")
def placement_command(
    n: Annotated[int, typer.Option("--n", help="Trajectories")] = 6400,
    m: Annotated[int, typer.Option("--m", help="Workers")] = 16,
    seed: Annotated[int, typer.Option(help="Workload seed")] = 0,
    workload: Annotated[str, typer.Option(help="Synthetic workload for the lengths")] = "coding",
    slope: Annotated[
        float, typer.Option(help="F(b) = 1 + slope (b - 1); 0.0122 is Qwen3-8B (calibration.md)")
    ] = 0.0122,
    max_batch: Annotated[int, typer.Option(help="KV cap: F = inf above it (0: none)")] = 0,
    repeats: Annotated[int, typer.Option(help="Timed runs of the fast solver")] = 20,
    reference_repeats: Annotated[int, typer.Option(help="Timed runs of the O(n^2 m) DP")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Time the exact placement solver against the paper's O(n^2 m) DP on the same input."""
    for value, flag in ((n, "--n"), (m, "--m"), (repeats, "--repeats")):
        _positive(value, flag)
    _positive(reference_repeats, "--reference-repeats")
    if not slope >= 0.0 or max_batch < 0:
        raise UserError("--slope must be >= 0 and --max-batch >= 0")
    lengths, _ = _workload_lengths(workload, n, seed)
    interference = LinearInterference(slope, max_batch)
    fast, solver_ms = _timed(lambda: partition(lengths, m, interference), repeats)
    reference, reference_ms = _timed(
        lambda: partition_reference(lengths, m, interference), reference_repeats
    )
    report = {
        "n": n,
        "m": m,
        "workload": workload,
        "seed": seed,
        "slope": slope,
        "max_batch": max_batch,
        "solver_ms": round(solver_ms, 3),
        "reference_ms": round(reference_ms, 3),
        "speedup": round(reference_ms / solver_ms, 1),
        "equal": fast.makespan == reference.makespan,
        "makespan": fast.makespan,
        "reference_makespan": reference.makespan,
        "repeats": repeats,
        "reference_repeats": reference_repeats,
    }
    report |= _migration_figures(lengths, fast, seed)
    _emit(report, as_json, "Placement: exact solver vs the paper's DP (medians)")


def _migration_figures(lengths: list[float], placed: Partition, seed: int) -> dict[str, Any]:
    """Microseconds per prediction update of the migration planner over all ``n`` trajectories
    (each re-predicted once, by a lognormal factor of spread 0.3), and how many migrate."""
    worker_ids = [f"w{i}" for i in range(placed.num_workers)]
    planner = MigrationPlanner(shares_from_partition(placed, lengths, worker_ids))
    for worker, group in enumerate(placed.groups):
        for index in group:
            planner.add(f"t{index}", worker_ids[worker], lengths[index])
    rng = random.Random(seed)
    updates = [(f"t{i}", length * rng.lognormvariate(0.0, 0.3)) for i, length in enumerate(lengths)]
    start = time.perf_counter()
    requests = [planner.update(traj_id, predicted) for traj_id, predicted in updates]
    elapsed_s = time.perf_counter() - start
    num_migrations = sum(request is not None for request in requests)
    return {
        "migration_update_us": round(elapsed_s / len(updates) * 1e6, 2),
        "migrations_per_update": round(num_migrations / len(updates), 4),
    }


@bench_app.command("annealing")
def annealing_command(
    gpus: Annotated[int, typer.Option(help="GPU budget")] = 64,
    n: Annotated[int, typer.Option("--n", help="Trajectories")] = 6400,
    seed: Annotated[int, typer.Option(help="Workload and annealing seed")] = 0,
    workload: Annotated[str, typer.Option(help="Synthetic workload for the lengths")] = "coding",
    model: Annotated[str, typer.Option(help=f"Model preset: {sorted(MODELS)}")] = "qwen3-32b",
    hardware: Annotated[str, typer.Option(help=f"GPU preset: {sorted(HARDWARE)}")] = "h100",
    small_budgets: Annotated[
        str, typer.Option(help="Comma-separated small budgets also solved exhaustively")
    ] = "8,16",
    exhaustive: Annotated[
        bool, typer.Option(help="Also search the main budget exhaustively (slow)")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Time sort-initialised annealing to a TP plan; compare with Fix-1, Fix-8 and exhaustive."""
    _positive(gpus, "--gpus")
    _positive(n, "--n")
    budgets = _parse_budgets(small_budgets)
    cost_models = _cost_models(model, hardware)
    lengths, context = _workload_lengths(workload, n, seed)
    report: dict[str, Any] = {"gpus": gpus, "n": n, "workload": workload, "seed": seed}
    report |= {"model": model, "hardware": hardware, "context_tokens": round(context)}
    report |= _budget_report(lengths, gpus, cost_models, round(context), seed, exhaustive)
    report["small_budgets"] = [
        _budget_report(lengths, budget, cost_models, round(context), seed, True)
        for budget in budgets
    ]
    _emit(report, as_json, f"Annealing: {model} on {hardware}, {n} trajectories")


def _parse_budgets(text: str) -> list[int]:
    try:
        budgets = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(
            f"--small-budgets must be integers separated by commas, got {text!r}"
        ) from None
    return [_positive(budget, "--small-budgets") for budget in budgets]


def _cost_models(model: str, hardware: str) -> dict[int, Any]:
    try:
        return {tp: preset(model, hardware, tp) for tp in TP_DEGREES}
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _budget_report(
    lengths: list[float],
    gpus: int,
    cost_models: dict[int, Any],
    context: int,
    seed: int,
    with_exhaustive: bool,
) -> dict[str, Any]:
    try:
        problem = ResourceProblem(lengths, gpus, cost_models, context)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    result, plan_ms = _timed(lambda: anneal(problem, random.Random(seed)), 1)
    fix1 = problem.makespan_s(fixed_configuration(problem, 1), exact=True)
    fix8 = problem.makespan_s(fixed_configuration(problem, 8), exact=True)
    report: dict[str, Any] = {
        "gpus": gpus,
        "plan_ms": round(plan_ms, 1),
        "tp_degrees": dict(sorted(Counter(result.plan.tp_degrees).items(), reverse=True)),
        "makespan_s": round(result.plan.makespan_s, 3),
        "annealed_makespan_s": round(result.annealed_makespan_s, 3),
        "fix1_makespan_s": round(fix1, 3),
        "fix8_makespan_s": round(fix8, 3),
        "speedup_vs_fix1": round(fix1 / result.plan.makespan_s, 3),
        "speedup_vs_fix8": round(fix8 / result.plan.makespan_s, 3),
        "num_proposals": result.num_proposals,
        "num_configurations": len(all_configurations(problem)),
    }
    if with_exhaustive:
        # A fresh problem: the annealer's memoised prices must not flatter the timing.
        fresh = ResourceProblem(lengths, gpus, cost_models, context)
        best, exhaustive_ms = _timed(lambda: exhaustive_search(fresh), 1)
        report["exhaustive_makespan_s"] = round(best.makespan_s, 3)
        report["exhaustive_ms"] = round(exhaustive_ms, 1)
        report["gap_vs_exhaustive"] = round(result.plan.makespan_s / best.makespan_s - 1, 4)
    return report


def _emit(report: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        typer.echo(json.dumps(report))
        return
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in report.items():
        if key == "small_budgets":
            for budget in value:
                table.add_row(f"[bold]{budget['gpus']} GPUs[/bold]", "")
                for sub_key, sub_value in budget.items():
                    table.add_row(f"  {sub_key}", str(sub_value))
        else:
            table.add_row(key, str(value))
    Console().print(table)
