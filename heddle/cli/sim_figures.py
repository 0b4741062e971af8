"""`heddle sim figures --out DIR`: the paper's experiments re-done in simulation.

Runs every experiment of ``heddle.bench.figures`` (Fig. 12, 14, 15, 16, the predictor study and
the control-plane overhead) at the paper's scale, or ``--quick`` for a small smoke run, writing
PNG plots, one markdown table per experiment and an index ``README.md`` into DIR. Progress goes
to stderr; the headlines (paper vs simulated) to stdout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from heddle.bench.figures import PAPER, QUICK, ExperimentReport, experiment_names, run_figures
from heddle.cli.apps import sim_app
from heddle.errors import UserError


class RichProgress:
    """A progress bar per experiment on stderr, labelled with the run in flight."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID | None = None
        self._title = ""
        self._remaining = 0

    def start(self, title: str, num_steps: int) -> None:
        self._title = title
        self._remaining = num_steps
        self._task = self._progress.add_task(title, total=num_steps)

    def advance(self, label: str) -> None:
        if self._task is None:
            return
        self._remaining -= 1
        description = f"{self._title}: {label}" if self._remaining > 0 else self._title
        self._progress.update(self._task, advance=1, description=description)


@sim_app.command("figures")
def figures(
    out: Annotated[Path, typer.Option("--out", help="Folder for the plots and tables")] = Path(
        "figures"
    ),
    quick: Annotated[
        bool, typer.Option("--quick", help="Small smoke run (seconds) instead of paper scale")
    ] = False,
    only: Annotated[
        str, typer.Option(help=f"Comma-separated experiments: {', '.join(experiment_names())}")
    ] = "",
    trajectories: Annotated[
        int | None, typer.Option(help="Trajectories per rollout (default: the scale's)")
    ] = None,
    gpus: Annotated[
        int | None, typer.Option(help="GPU budget, >= 8 (default: the scale's)")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the workloads and the simulator")] = 0,
    engine_model: Annotated[
        str, typer.Option(help="Engine model of every system (sglang, torch)")
    ] = PAPER.engine_model,
) -> None:
    """Re-run the paper's experiments in simulation; write PNGs, tables and README.md to --out."""
    names = [name.strip() for name in only.split(",") if name.strip()]
    try:
        scale = (QUICK if quick else PAPER).resized(trajectories, gpus, seed, engine_model)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    unknown = [name for name in names if name not in experiment_names()]
    if unknown:
        raise UserError(f"unknown experiment {unknown[0]!r}; choose from {experiment_names()}")
    stderr = Console(stderr=True)
    for line in scale.describe():
        stderr.print(f"[dim]{line}[/dim]", highlight=False)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=stderr) as progress:
        reports = run_figures(out, scale, only=names, progress=RichProgress(progress))
    _print_headlines(reports, out)


def _print_headlines(reports: list[ExperimentReport], out: Path) -> None:
    table = Table(title=f"heddle sim figures -> {out / 'README.md'}")
    for column in ("experiment", "paper", "simulated"):
        table.add_column(column, overflow="fold")
    for report in reports:
        table.add_row(report.title, report.paper_claim, report.headline)
    Console().print(table)
