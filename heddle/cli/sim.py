"""`heddle sim compare`: every system of a list on the same trace, side by side.

    heddle sim compare --workload coding --model qwen3-32b --gpus 16 --trajectories 1024 \\
        --systems heddle,verl,slime --json

The trace is a synthetic workload (``--workload``; learning predictors are fitted on another
epoch of the same prompts, the previous training step) or a JSONL trace file (``--trace``, with
an optional ``--history`` file). Prints one JSON object with ``--json``, a table otherwise;
progress goes to stderr. Bad flags or a bad trace print one line and exit 2.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from heddle.cli.apps import sim_app
from heddle.control.systems import SYSTEMS
from heddle.errors import UserError
from heddle.policy.cost.model import HARDWARE, MODELS
from heddle.policy.engine_models import DEFAULT_ENGINE_MODEL, ENGINE_MODELS
from heddle.policy.prediction import PREDICTORS
from heddle.sim import SimConfig, SimResult, simulate
from heddle.sim.sweep import SPLITS, SweepConfig, run_sweep
from heddle.sim.sweep_plans import (
    plan_markdown,
    plan_sweep_document,
    run_plan_sweep,
    write_plan_figure,
)
from heddle.sim.sweep_report import markdown_report, write_figure
from heddle.sim.sweep_summary import sweep_document
from heddle.traces import TraceError, TraceTrajectory, read_trace
from heddle.workloads import generate, workload_names
from heddle.workloads.zoo import ZOO

DEFAULT_SYSTEMS = "heddle,verl,slime"
_T = TypeVar("_T")
_C = TypeVar("_C")
_DEFAULTS = SimConfig()


def _model_name(model: str) -> str:
    """``qwen3-32b`` or the short ``32b``."""
    name = model if model in MODELS else f"qwen3-{model.lower()}"
    if name not in MODELS:
        raise UserError(f"unknown --model {model!r}; choose one of {sorted(MODELS)}")
    return name


def _systems(systems: str) -> list[str]:
    """Comma-separated registry names; ``all`` is every registered system."""
    if systems.strip() == "all":
        return list(SYSTEMS)
    names = [name.strip() for name in systems.split(",") if name.strip()]
    if not names:
        raise UserError("--systems is empty; name at least one system")
    unknown = [name for name in names if name not in SYSTEMS]
    if unknown:
        raise UserError(f"unknown system {unknown[0]!r}; choose from {', '.join(SYSTEMS)}")
    return list(dict.fromkeys(names))


def _traces(
    workload: str | None, trace: Path | None, history: Path | None, num: int, seed: int
) -> tuple[list[TraceTrajectory], list[TraceTrajectory], str]:
    """The rollout's trace, the history predictors learn from, and a label for the source."""
    if (workload is None) == (trace is None):
        raise UserError("give exactly one of --workload or --trace")
    try:
        if trace is not None:
            past = read_trace(history) if history is not None else []
            return read_trace(trace), past, f"trace:{trace}"
        assert workload is not None
        if workload not in workload_names():
            raise UserError(f"unknown --workload {workload!r}; choose one of {workload_names()}")
        current = generate(workload, num, seed)
        return current, generate(workload, num, seed, epoch=1), f"workload:{workload}"
    except (TraceError, ValueError) as exc:
        raise UserError(str(exc)) from None


def _config(
    model: str,
    hardware: str,
    gpus: int,
    seed: int,
    predictor: str,
    sigma: float,
    engine_model: str = DEFAULT_ENGINE_MODEL,
) -> SimConfig:
    if engine_model not in ENGINE_MODELS:
        raise UserError(
            f"unknown --engine-model {engine_model!r}; choose one of {', '.join(ENGINE_MODELS)}"
        )
    if hardware not in HARDWARE:
        raise UserError(f"unknown --hardware {hardware!r}; choose one of {sorted(HARDWARE)}")
    if predictor not in PREDICTORS:
        raise UserError(f"unknown --predictor {predictor!r}; choose one of {sorted(PREDICTORS)}")
    try:
        return SimConfig(
            model=_model_name(model),
            hardware=hardware,
            num_gpus=gpus,
            seed=seed,
            predictor=predictor,
            predictor_sigma=sigma,
            engine_model=engine_model,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _run_all(
    trace: list[TraceTrajectory],
    history: list[TraceTrajectory],
    systems: list[str],
    config: SimConfig,
    show_progress: bool,
) -> tuple[dict[str, SimResult], dict[str, float]]:
    results: dict[str, SimResult] = {}
    wall_s: dict[str, float] = {}
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    console = Console(stderr=True)
    with Progress(*columns, console=console, disable=not show_progress) as progress:
        for name in systems:
            task = progress.add_task(f"{name:22s}", total=1.0)

            def advance(fraction: float, task_id: Any = task) -> None:
                progress.update(task_id, completed=fraction)

            start = time.perf_counter()
            try:
                results[name] = simulate(trace, name, config, history=history, progress=advance)
            except ValueError as exc:
                raise UserError(f"{name}: {exc}") from None
            wall_s[name] = time.perf_counter() - start
            progress.update(task, completed=1.0)
    return results, wall_s


def comparison(
    results: dict[str, SimResult], wall_s: dict[str, float], meta: dict[str, Any]
) -> dict[str, Any]:
    """The JSON document: the run's settings, each system's figures, and throughput ratios of
    the first system over each other one."""
    systems = {
        name: {**result.summary(), "simulation_wall_s": wall_s.get(name, 0.0)}
        for name, result in results.items()
    }
    names = list(results)
    first = results[names[0]]
    ratios = {
        f"{names[0]}_over_{name}": first.throughput_tok_s / result.throughput_tok_s
        for name, result in results.items()
        if name != names[0] and result.throughput_tok_s > 0
    }
    return {**meta, "systems": systems, "throughput_ratios": ratios}


def _print_table(document: dict[str, Any]) -> None:
    table = Table(title=f"{document['source']}: {document['num_trajectories']} trajectories")
    for column in (
        "system",
        "makespan s",
        "tokens/s",
        "LB s",
        "x LB",
        "TP",
        "slowest q/gen/tool/mig s",
    ):
        table.add_column(column, justify="left" if column == "system" else "right")
    for name, row in document["systems"].items():
        slow = row["slowest"]
        breakdown = "/".join(
            f"{slow[key]:.0f}" for key in ("queue_s", "generation_s", "tool_s", "migration_s")
        )
        table.add_row(
            name,
            f"{row['makespan_s']:.0f}",
            f"{row['throughput_tok_s']:.0f}",
            f"{row['lower_bound_s']:.0f}",
            f"{row['makespan_over_lb']:.2f}",
            ",".join(str(tp) for tp in row["tp_degrees"]),
            breakdown,
        )
    Console().print(table)
    for label, ratio in document["throughput_ratios"].items():
        Console().print(f"{label}: {ratio:.2f}x throughput")


@sim_app.command("compare")
def compare(
    workload: Annotated[
        str | None, typer.Option(help=f"Synthetic workload: {', '.join(workload_names())}")
    ] = None,
    trace: Annotated[Path | None, typer.Option(help="JSONL trace file instead")] = None,
    history: Annotated[
        Path | None, typer.Option(help="With --trace: earlier trajectories predictors learn from")
    ] = None,
    model: Annotated[str, typer.Option(help="qwen3-8b, qwen3-14b or qwen3-32b")] = "qwen3-32b",
    hardware: Annotated[str, typer.Option(help="h100 or h200")] = "h200",
    gpus: Annotated[int, typer.Option(help="GPU budget")] = 16,
    trajectories: Annotated[int, typer.Option(help="Trajectories (with --workload)")] = 1024,
    seed: Annotated[int, typer.Option(help="Seed of the workload and the simulator")] = 0,
    systems: Annotated[
        str, typer.Option(help=f"Comma-separated, or all: {', '.join(SYSTEMS)}")
    ] = DEFAULT_SYSTEMS,
    engine_model: Annotated[
        str,
        typer.Option(help=f"How every system's engines behave: {', '.join(ENGINE_MODELS)}"),
    ] = DEFAULT_ENGINE_MODEL,
    predictor: Annotated[
        str, typer.Option(help=f"Predictor of the systems that predict: {', '.join(PREDICTORS)}")
    ] = _DEFAULTS.predictor,
    sigma: Annotated[
        float, typer.Option(help="Noisy oracle: log-error standard deviation")
    ] = _DEFAULTS.predictor_sigma,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Simulate each system on the same trace; makespan, throughput and the lower bound."""
    if trajectories < 1:
        raise UserError(f"--trajectories must be >= 1, got {trajectories}")
    names = _systems(systems)
    config = _config(model, hardware, gpus, seed, predictor, sigma, engine_model)
    rollout, past, source = _traces(workload, trace, history, trajectories, seed)
    results, wall_s = _run_all(rollout, past, names, config, show_progress=sys.stderr.isatty())
    meta = {
        "source": source,
        "num_trajectories": len(rollout),
        "config": {
            key: value
            for key, value in asdict(config).items()
            if key not in ("record_events", "record_worker_timelines")
        },
    }
    document = comparison(results, wall_s, meta)
    if as_json:
        typer.echo(json.dumps(document))
    else:
        _print_table(document)


# --- `heddle sim sweep`: every system over the workload zoo (heddle.sim.sweep) ---------------

_SWEEP_DEFAULTS = SweepConfig()


def _sweep_list(
    flag: str, text: str, parse: Callable[[str], _T], choices: Any = None
) -> tuple[_T, ...]:
    """A comma-separated flag value, each item parsed and (with ``choices``) checked."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UserError(f"{flag} is empty")
    values: list[_T] = []
    for item in items:
        try:
            value = parse(item)
        except ValueError:
            raise UserError(f"{flag}: cannot read {item!r}") from None
        if choices is not None and value not in choices:
            raise UserError(f"{flag}: unknown {item!r}; choose from {', '.join(map(str, choices))}")
        values.append(value)
    return tuple(dict.fromkeys(values))


def _sweep_config(
    families: str,
    models: str,
    gpus: str,
    kv_ratios: str,
    cells: int,
    seed: int,
    split: str,
    systems: str,
    engine_model: str,
    predictor: str,
    steps_per_cell: int,
) -> SweepConfig:
    if split not in SPLITS:
        raise UserError(f"unknown --split {split!r}; choose one of {', '.join(SPLITS)}")
    if engine_model not in ENGINE_MODELS:
        raise UserError(
            f"unknown --engine-model {engine_model!r}; choose one of {', '.join(ENGINE_MODELS)}"
        )
    if predictor not in PREDICTORS:
        raise UserError(f"unknown --predictor {predictor!r}; choose one of {sorted(PREDICTORS)}")
    if cells < 1 or steps_per_cell < 1:
        raise UserError("--cells and --steps-per-cell must be >= 1")
    ratios = _sweep_list("--kv-ratios", kv_ratios, float)
    gpu_counts = _sweep_list("--gpus", gpus, int)
    if min(ratios) <= 0 or min(gpu_counts) < 1:
        raise UserError("--kv-ratios must be > 0 and --gpus >= 1")
    names = _sweep_list("--families", families, str, list(ZOO))
    model_names = tuple(dict.fromkeys(_model_name(m) for m in _sweep_list("--models", models, str)))
    try:
        return SweepConfig(
            families=names,
            models=model_names,
            gpu_counts=gpu_counts,
            kv_ratios=ratios,
            num_cells=cells,
            seed=seed,
            split=split,
            systems=tuple(_systems(systems)),
            engine_model=engine_model,
            predictor=predictor,
            steps_per_cell=steps_per_cell,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _run_with_progress(
    config: SweepConfig, jobs: int, run: Callable[..., list[_C]], what: str
) -> list[_C]:
    """``run(config, jobs=, on_done=)`` with a progress bar over its cells on stderr."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(
        *columns, console=Console(stderr=True), disable=not sys.stderr.isatty()
    ) as progress:
        task = progress.add_task(what, total=config.num_cells)

        def done(result: Any) -> None:
            progress.advance(task)
            cell = result.cell
            label = f"cell {cell.index} {cell.family} {cell.model} x{cell.num_gpus}"
            progress.console.print(f"{label} done in {result.wall_s:.0f} s")

        return run(config, jobs=jobs, on_done=done)


@sim_app.command("sweep")
def sweep(
    families: Annotated[
        str, typer.Option(help=f"Comma-separated zoo families: {', '.join(ZOO)}")
    ] = ",".join(_SWEEP_DEFAULTS.families),
    models: Annotated[str, typer.Option(help="Comma-separated models")] = ",".join(
        _SWEEP_DEFAULTS.models
    ),
    gpus: Annotated[str, typer.Option(help="Comma-separated GPU counts")] = ",".join(
        map(str, _SWEEP_DEFAULTS.gpu_counts)
    ),
    kv_ratios: Annotated[
        str, typer.Option(help="Target KV footprint / capacity ratios")
    ] = ",".join(map(str, _SWEEP_DEFAULTS.kv_ratios)),
    cells: Annotated[int, typer.Option(help="Number of cells")] = _SWEEP_DEFAULTS.num_cells,
    seed: Annotated[int, typer.Option(help="Base seed of the grid and the parameter draws")] = 0,
    split: Annotated[
        str, typer.Option(help="tuning, heldout or all (held-out draws: never tune on them)")
    ] = "all",
    systems: Annotated[str, typer.Option(help="Comma-separated systems (default: all)")] = ",".join(
        SYSTEMS
    ),
    engine_model: Annotated[
        str, typer.Option(help="Engine model of every system")
    ] = _SWEEP_DEFAULTS.engine_model,
    predictor: Annotated[
        str, typer.Option(help="Predictor of the systems that predict")
    ] = _SWEEP_DEFAULTS.predictor,
    steps_per_cell: Annotated[
        int, typer.Option(help="Trajectory steps per cell (sizes each cell)")
    ] = _SWEEP_DEFAULTS.steps_per_cell,
    jobs: Annotated[int, typer.Option(help="Worker processes")] = 2,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    markdown: Annotated[Path | None, typer.Option(help="Write a markdown report here")] = None,
    figure: Annotated[Path | None, typer.Option(help="Write a PNG figure here")] = None,
    plans: Annotated[
        bool,
        typer.Option(
            "--plans",
            help="Instead of the systems: estimate vs simulated makespan of every candidate "
            "TP plan per cell, and heddle's pick against the best homogeneous plan",
        ),
    ] = False,
) -> None:
    """Every system on zoo cells (family x draw x model x GPUs x KV pressure); ratios to heddle."""
    if jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")
    config = _sweep_config(
        families,
        models,
        gpus,
        kv_ratios,
        cells,
        seed,
        split,
        systems,
        engine_model,
        predictor,
        steps_per_cell,
    )
    start = time.perf_counter()
    if plans:
        _plan_sweep(config, jobs, as_json, markdown, figure)
        return
    results = _run_with_progress(config, jobs, run_sweep, "sweep cells")
    document = sweep_document(config, results, time.perf_counter() - start, jobs)
    if markdown is not None:
        markdown.write_text(markdown_report(results, config))
    if figure is not None:
        write_figure(results, figure)
    if as_json:
        typer.echo(json.dumps(document))
    else:
        typer.echo(markdown_report(results, config))


def _plan_sweep(
    config: SweepConfig, jobs: int, as_json: bool, markdown: Path | None, figure: Path | None
) -> None:
    start = time.perf_counter()
    results = _run_with_progress(config, jobs, run_plan_sweep, "plan cells")
    report = plan_markdown(config, results)
    if markdown is not None:
        markdown.write_text(report)
    if figure is not None:
        write_plan_figure(results, figure)
    if as_json:
        typer.echo(json.dumps(plan_sweep_document(config, results, time.perf_counter() - start)))
    else:
        typer.echo(report)
