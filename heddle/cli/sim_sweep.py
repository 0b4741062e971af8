"""`heddle sim sweep`: every system over the workload zoo (``heddle.experiments.sweep``), one cell
per family x draw x model x GPUs x KV pressure x history, ratios to heddle, and the regression
corpus' cells beside them (``heddle.experiments.corpus``); with ``--plans``, every candidate TP plan
per cell instead of the systems. Bad flags print one line and exit 2.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from heddle.cli.apps import sim_app
from heddle.cli.sim_choices import model_name, system_names
from heddle.control.systems import SYSTEMS
from heddle.errors import UserError
from heddle.experiments.cells import SPLITS
from heddle.experiments.sweep import CellResult, SweepConfig, run_sweep, sweep_cells
from heddle.experiments.sweep_plans import (
    plan_markdown,
    plan_sweep_document,
    run_plan_sweep,
    write_plan_figure,
)
from heddle.experiments.sweep_report import markdown_report, write_figure
from heddle.experiments.sweep_summary import sweep_document
from heddle.policy.engine_models import ENGINE_MODELS
from heddle.policy.prediction import CONTEXT_PREDICTOR
from heddle.sim.config import SIM_PREDICTORS
from heddle.workloads.history import HISTORY_KINDS, HistoryKind, history_kind
from heddle.workloads.text import SIGNAL_LEVELS
from heddle.workloads.zoo import ZOO

_T = TypeVar("_T")
_C = TypeVar("_C")


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
    if predictor not in SIM_PREDICTORS:
        raise UserError(
            f"unknown --predictor {predictor!r}; choose one of {sorted(SIM_PREDICTORS)}"
        )
    if cells < 1 or steps_per_cell < 1:
        raise UserError("--cells and --steps-per-cell must be >= 1")
    ratios = _sweep_list("--kv-ratios", kv_ratios, float)
    gpu_counts = _sweep_list("--gpus", gpus, int)
    if min(ratios) <= 0 or min(gpu_counts) < 1:
        raise UserError("--kv-ratios must be > 0 and --gpus >= 1")
    names = _sweep_list("--families", families, str, list(ZOO))
    model_names = tuple(dict.fromkeys(model_name(m) for m in _sweep_list("--models", models, str)))
    try:
        return SweepConfig(
            families=names,
            models=model_names,
            gpu_counts=gpu_counts,
            kv_ratios=ratios,
            num_cells=cells,
            seed=seed,
            split=split,
            systems=tuple(system_names(systems)),
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
        task = progress.add_task(what, total=len(sweep_cells(config)))

        def done(result: Any) -> None:
            progress.advance(task)
            cell = result.cell
            label = f"cell {cell.index} {cell.family} {cell.model} x{cell.num_gpus} {cell.history}"
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
    cells: Annotated[
        int, typer.Option(help="Tuning cells (the grid earlier sweeps ran)")
    ] = _SWEEP_DEFAULTS.num_cells,
    heldout_cells: Annotated[
        int, typer.Option(help="Fresh held-out cells (draw seeds no decision has seen)")
    ] = _SWEEP_DEFAULTS.num_heldout_cells,
    histories: Annotated[
        str,
        typer.Option(
            help=f"Histories each zoo cell is judged with, comma-separated: "
            f"{', '.join(HISTORY_KINDS)} (other: other prompts, the previous step)"
        ),
    ] = ",".join(_SWEEP_DEFAULTS.histories),
    corpus: Annotated[
        bool, typer.Option("--corpus/--no-corpus", help="Run the regression corpus' cells too")
    ] = _SWEEP_DEFAULTS.with_corpus,
    corpus_dir: Annotated[
        Path | None, typer.Option(help="The corpus folder (default: the package's)")
    ] = None,
    seed: Annotated[int, typer.Option(help="Base seed of the grid and the parameter draws")] = 0,
    split: Annotated[
        str,
        typer.Option(help="tuning, heldout, corpus or all (held-out draws: never tune on them)"),
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
    replications: Annotated[
        int,
        typer.Option(
            help="Epochs of each cell's workload every system runs; makespans are their means "
            "(the cost grows with it)"
        ),
    ] = _SWEEP_DEFAULTS.replications,
    jobs: Annotated[int, typer.Option(help="Worker processes")] = 2,
    reference: Annotated[
        bool,
        typer.Option(help="Also the best-known reference per cell (heddle, oracle, every plan)"),
    ] = False,
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
    predictor_model: Annotated[
        str, typer.Option(help="context: a model folder (default: one trained per cell)")
    ] = "",
    predictor_latency_ms: Annotated[
        float, typer.Option(help="context: the prediction service's round trip (ms)")
    ] = 0.0,
    text_signal: Annotated[
        str, typer.Option(help=f"Text layer on the traces: {', '.join(SIGNAL_LEVELS)} or 0..1")
    ] = "",
) -> None:
    """Every system on zoo cells (family x draw x model x GPUs x KV pressure); ratios to heddle."""
    if jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")
    if replications < 1:
        raise UserError(f"--replications must be >= 1, got {replications}")
    if plans and replications != 1:
        raise UserError("--replications is for the systems' sweep, not --plans")
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
    config = _with_context(config, predictor_model, predictor_latency_ms, text_signal)
    config = _with_cells(config, heldout_cells, histories, corpus, corpus_dir)
    config = replace(config, replications=replications, reference=reference)
    start = time.perf_counter()
    if plans:
        _plan_sweep(config, jobs, as_json, markdown, figure)
        return
    run: Callable[..., list[CellResult]] = run_sweep
    if config.predictor == CONTEXT_PREDICTOR:
        from heddle.experiments.sweep_context import run_context_cell  # imports torch

        run = partial(run_sweep, run=run_context_cell)
    results = _run_with_progress(config, jobs, run, "sweep cells")
    wall_s = time.perf_counter() - start
    _write_sweep_files(config, results, markdown, figure)
    _report_sweep(config, results, sweep_document(config, results, wall_s, jobs), as_json)


def _with_context(
    config: SweepConfig, model: str, latency_ms: float, text_signal: str
) -> SweepConfig:
    """The sweep's context-predictor flags: the model, the service latency, the text layer."""
    signal: float | None = None
    if text_signal:
        try:
            signal = SIGNAL_LEVELS.get(text_signal)
            signal = float(text_signal) if signal is None else signal
        except ValueError:
            raise UserError(f"--text-signal: cannot read {text_signal!r}") from None
        if not 0 <= signal <= 1:
            raise UserError("--text-signal must be in [0, 1]")
    if latency_ms < 0:
        raise UserError("--predictor-latency-ms must be >= 0")
    if model and not (Path(model) / "config.json").is_file():
        raise UserError(f"--predictor-model {model}: not a model folder (no config.json)")
    return replace(
        config, predictor_model=model, predictor_latency_ms=latency_ms, text_signal=signal
    )


def _with_cells(
    config: SweepConfig,
    heldout_cells: int,
    histories: str,
    corpus: bool,
    corpus_dir: Path | None,
) -> SweepConfig:
    """The held-out count, the histories and the corpus flags (the context model needs a
    history and texts: no ``none`` history, no corpus with it)."""
    kinds: tuple[HistoryKind, ...] = _sweep_list("--histories", histories, history_kind)
    if heldout_cells < 0:
        raise UserError("--heldout-cells must be >= 0")
    if corpus_dir is not None and not corpus_dir.is_dir():
        raise UserError(f"--corpus-dir {corpus_dir}: not a folder")
    if config.predictor == CONTEXT_PREDICTOR:
        if "none" in kinds:
            raise UserError("--predictor context learns from a history: drop none from --histories")
        corpus = False
    return replace(
        config,
        num_heldout_cells=heldout_cells,
        histories=kinds,
        with_corpus=corpus,
        corpus_dir=str(corpus_dir or ""),
    )


def _report_sweep(
    config: SweepConfig, results: list[CellResult], document: dict[str, Any], as_json: bool
) -> None:
    if as_json:
        typer.echo(json.dumps(document))
    else:
        typer.echo(markdown_report(results, config))


def _write_sweep_files(
    config: SweepConfig, results: list[CellResult], markdown: Path | None, figure: Path | None
) -> None:
    if markdown is not None:
        markdown.write_text(markdown_report(results, config))
    if figure is not None:
        write_figure(results, figure)


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
