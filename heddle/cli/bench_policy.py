"""`heddle bench placement` and `heddle bench annealing`: the policy core's benchmarks.

``annealing`` keeps its name, but times the resource planner that replaced the paper's
annealing (``heddle.control.resources``) and compares the two (``heddle.cli.planner_report``).

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
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from heddle.cli.apps import bench_app
from heddle.cli.planner_report import PlanningInputs, budget_report, validation_report
from heddle.errors import UserError
from heddle.policy.cost.model import HARDWARE, MODELS, TP_DEGREES, preset
from heddle.policy.migration.planner import MigrationPlanner, shares_from_partition
from heddle.policy.placement.presorted import Partition, partition, partition_reference
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
        float,
        typer.Option(help="F(b) = 1 + slope (b - 1); 0.0122 is Qwen3-8B (docs/calibration.md)"),
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
    gpus: Annotated[str, typer.Option(help="Comma-separated GPU budgets")] = "8,16,32,64,128,256",
    n: Annotated[int, typer.Option("--n", help="Trajectories")] = 6400,
    seed: Annotated[int, typer.Option(help="Workload and annealing seed")] = 0,
    workload: Annotated[str, typer.Option(help="Synthetic workload for the lengths")] = "coding",
    model: Annotated[str, typer.Option(help=f"Model preset: {sorted(MODELS)}")] = "qwen3-32b",
    hardware: Annotated[str, typer.Option(help=f"GPU preset: {sorted(HARDWARE)}")] = "h100",
    annealer_max_gpus: Annotated[
        int, typer.Option(help="Also run the paper's annealer up to this budget (slow; 0: never)")
    ] = 64,
    exhaustive_max_gpus: Annotated[
        int, typer.Option(help="Also search exhaustively up to this budget")
    ] = 16,
    validate: Annotated[
        bool, typer.Option(help="Simulate every candidate plan on 4 workloads x 8, 16 GPUs")
    ] = False,
    validate_n: Annotated[int, typer.Option(help="Trajectories per validation run")] = 512,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Time resource planning per GPU budget (exact search + plan estimate over the candidate
    plans) against the paper's annealer and exhaustive search; ``--validate``: estimate vs
    simulated makespan per plan."""
    _positive(n, "--n")
    _positive(validate_n, "--validate-n")
    budgets = _parse_budgets(gpus)
    cost_for_tp = _cost_models(model, hardware).__getitem__
    if workload not in workload_names():
        raise UserError(f"unknown workload {workload!r}; choose one of {workload_names()}")
    inputs = PlanningInputs(
        generate(workload, n, seed), generate(workload, n, seed, epoch=1), cost_for_tp
    )
    report: dict[str, Any] = {"n": n, "workload": workload, "seed": seed}
    report |= {"model": model, "hardware": hardware, "context_tokens": inputs.context}
    try:
        report["budgets"] = [
            budget_report(
                inputs, budget, seed, budget <= annealer_max_gpus, budget <= exhaustive_max_gpus
            )
            for budget in budgets
        ]
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if validate:
        report["validation"] = validation_report(model, hardware, validate_n, seed)
    _emit(report, as_json, f"Resource planning: {model} on {hardware}, {n} trajectories")


def _parse_budgets(text: str) -> list[int]:
    try:
        budgets = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--gpus must be integers separated by commas, got {text!r}") from None
    if not budgets:
        raise UserError("--gpus needs at least one budget")
    return [_positive(budget, "--gpus") for budget in budgets]


def _cost_models(model: str, hardware: str) -> dict[int, Any]:
    try:
        return {tp: preset(model, hardware, tp) for tp in TP_DEGREES}
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _emit(report: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        typer.echo(json.dumps(report))
        return
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in report.items():
        if key in ("budgets", "validation"):
            for row in value:
                heading = f"{row.get('workload', '')} {row['gpus']} GPUs".strip()
                table.add_row(f"[bold]{heading}[/bold]", "")
                for sub_key, sub_value in row.items():
                    if sub_key == "plans":
                        for plan in sub_value:
                            table.add_row(f"  {plan.pop('tp_degrees')}", str(plan))
                    elif sub_key not in ("gpus", "workload"):
                        table.add_row(f"  {sub_key}", str(sub_value))
        else:
            table.add_row(key, str(value))
    Console().print(table)
