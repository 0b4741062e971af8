"""`heddle sim compare`: every system of a list on the same trace, side by side.

    heddle sim compare --workload coding --model qwen3-32b --gpus 16 --trajectories 1024 \\
        --systems heddle,verl,slime --json

The trace is a synthetic workload (``--workload``; learning predictors are fitted on the history
``--workload-history`` names, ``heddle.workloads.history``: by default the previous training step,
other prompts of the same workload) or a JSONL trace file (``--trace``, with an optional
``--history`` file). Prints one JSON object with ``--json``, a table otherwise;
progress goes to stderr. With ``--reference`` it also reports the best-known reference apart
from the systems (``heddle.experiments.reference``: heddle with the oracle predictor on every TP
plan, the fastest), and heddle over it beside heddle over the lower bound. Bad flags or a bad trace
print one line and exit 2. With ``--async-steps S`` it simulates S training steps per system
instead, the stop-the-world loop against partial rollout with ``--max-staleness``
(``heddle.cli.sim_loop``).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from heddle.cli.apps import sim_app
from heddle.cli.sim_choices import model_name, system_names
from heddle.cli.sim_loop import print_loops, run_loops, step_traces, trainer_time
from heddle.control.systems import SYSTEMS
from heddle.errors import UserError
from heddle.experiments.reference import Reference, best_known
from heddle.policy.cost.model import HARDWARE
from heddle.policy.engine_models import DEFAULT_ENGINE_MODEL, ENGINE_MODELS
from heddle.policy.prediction import PREDICTORS
from heddle.sim import SimConfig, SimResult, simulate
from heddle.traces import TraceError, TraceTrajectory, read_trace
from heddle.workloads import generate, workload_names
from heddle.workloads.history import DEFAULT_HISTORY, HISTORY_KINDS, history_kind, make_history

COMPARED_SYSTEMS = "heddle,verl,slime"
_DEFAULTS = SimConfig()


def _traces(
    workload: str | None,
    trace: Path | None,
    history: Path | None,
    num: int,
    seed: int,
    workload_history: str = DEFAULT_HISTORY,
) -> tuple[list[TraceTrajectory], list[TraceTrajectory], str]:
    """The rollout's trace, the history predictors learn from (a workload's of the kind
    ``workload_history`` names), and a label for the source."""
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
        name = workload

        def sample(sample_seed: int, epoch: int) -> list[TraceTrajectory]:
            return generate(name, num, sample_seed, epoch=epoch)

        past = make_history(history_kind(workload_history), sample, seed)
        return current, past, f"workload:{workload}"
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
            model=model_name(model),
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


def reference_summary(reference: Reference, results: dict[str, SimResult]) -> dict[str, Any]:
    """The reference's figures, and heddle's over it beside heddle's over the lower bound."""
    summary: dict[str, Any] = {
        "system": "heddle (oracle predictor, best of every plan; not a system)",
        "makespan_s": reference.makespan_s,
        "tp_degrees": reference.tp_degrees,
        "num_plans": reference.num_plans,
        "is_exhaustive": reference.is_exhaustive,
        "wall_s": reference.wall_s,
    }
    heddle = results.get("heddle")
    if heddle is not None:
        summary["heddle_over_reference"] = heddle.makespan_s / reference.makespan_s
        summary["reference_over_lb"] = reference.makespan_s / heddle.lower_bound_s
        summary["heddle_over_lb"] = heddle.makespan_over_lb
    return summary


def _print_table(document: dict[str, Any]) -> None:
    table = Table(title=f"{document['source']}: {document['num_trajectories']} trajectories")
    for column in (
        "system",
        "makespan s",
        "tokens/s",
        "LB s",
        "x LB",
        "TP",
        "slowest's columns s",
    ):
        table.add_column(column, justify="left" if column == "system" else "right")
    for name, row in document["systems"].items():
        slow = row["slowest"]
        breakdown = " ".join(
            f"{key.removesuffix('_s')} {slow[key]:.0f}"
            for key in slow["columns"]
            if round(slow[key]) > 0
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
    reference = document.get("reference")
    if reference is not None:
        line = f"reference (not a system): {reference['makespan_s']:.0f} s"
        if "heddle_over_reference" in reference:
            line += (
                f"; heddle / reference {reference['heddle_over_reference']:.3f}, "
                f"reference / LB {reference['reference_over_lb']:.3f}"
            )
        Console().print(line)


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
    workload_history: Annotated[
        str,
        typer.Option(
            help=f"With --workload, the history: {', '.join(HISTORY_KINDS)} (other: other "
            "prompts, the previous step; same: the same prompts, an epoch back)"
        ),
    ] = DEFAULT_HISTORY,
    seed: Annotated[int, typer.Option(help="Seed of the workload and the simulator")] = 0,
    systems: Annotated[
        str, typer.Option(help=f"Comma-separated, or all: {', '.join(SYSTEMS)}")
    ] = COMPARED_SYSTEMS,
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
    async_steps: Annotated[
        int, typer.Option(help="Simulate this many training steps: stop-the-world vs partial")
    ] = 0,
    max_staleness: Annotated[
        int, typer.Option(help="With --async-steps: partial rollout's bound k (>= 1)")
    ] = 1,
    trainer_s: Annotated[
        float | None, typer.Option(help="With --async-steps: the trainer's seconds per step")
    ] = None,
    trainer_fraction: Annotated[
        float | None,
        typer.Option(help="With --async-steps: trainer time as a fraction of the first rollout"),
    ] = None,
    weight_load_s: Annotated[
        float | None,
        typer.Option(help="Seconds a worker pauses to load weights (default: from model size)"),
    ] = None,
    control_latency_p50_ms: Annotated[
        float, typer.Option(help="Median delay of every command the control plane sends (ms)")
    ] = _DEFAULTS.control_latency_p50_ms,
    control_latency_p99_ms: Annotated[
        float, typer.Option(help="Its 99th percentile (ms; both 0: commands arrive at once)")
    ] = _DEFAULTS.control_latency_p99_ms,
    engine_restart_s: Annotated[
        float,
        typer.Option(help="A re-shard's engine relaunch, weights aside (s; heddle re-shards)"),
    ] = _DEFAULTS.engine_restart_s,
    reference: Annotated[
        bool,
        typer.Option(help="Also the best-known reference: heddle, oracle predictor, every plan"),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Simulate each system on the same trace; makespan, throughput and the lower bound."""
    if trajectories < 1:
        raise UserError(f"--trajectories must be >= 1, got {trajectories}")
    if async_steps < 0 or max_staleness < 1:
        raise UserError("--async-steps must be >= 0 and --max-staleness >= 1")
    names = system_names(systems)
    config = _config(model, hardware, gpus, seed, predictor, sigma, engine_model)
    if weight_load_s is not None:
        if weight_load_s < 0:
            raise UserError(f"--weight-load-s must be >= 0, got {weight_load_s}")
        config = replace(config, weight_load_s=weight_load_s)
    try:
        config = replace(
            config,
            control_latency_p50_ms=control_latency_p50_ms,
            control_latency_p99_ms=control_latency_p99_ms,
            engine_restart_s=engine_restart_s,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    rollout, past, source = _traces(workload, trace, history, trajectories, seed, workload_history)
    if async_steps:
        trainer = trainer_time(trainer_s, trainer_fraction)
        traces, histories = step_traces(workload, rollout, past, async_steps, seed)
        loops = run_loops(traces, histories, names, config, max_staleness, trainer)
        meta = {"source": source, "num_trajectories": len(rollout), "num_steps": async_steps}
        print_loops({**meta, "config": asdict(config), "systems": loops}, as_json)
        return
    results, wall_s = _run_all(rollout, past, names, config, show_progress=sys.stderr.isatty())
    meta = {
        "source": source,
        "num_trajectories": len(rollout),
        "history": workload_history if trace is None else ("file" if history else "none"),
        "config": {
            key: value
            for key, value in asdict(config).items()
            if key not in ("record_events", "record_worker_timelines")
        },
    }
    document = comparison(results, wall_s, meta)
    if reference:
        document["reference"] = reference_summary(best_known(rollout, past, config), results)
    if as_json:
        typer.echo(json.dumps(document))
    else:
        _print_table(document)
