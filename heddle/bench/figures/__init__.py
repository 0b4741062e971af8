"""The paper's experiments re-done in simulation (``heddle sim figures``).

    >>> from heddle.bench.figures import QUICK, run_figures
    >>> reports = run_figures(Path("figures"), QUICK)

Each experiment (``EXPERIMENTS``, in the paper's order) runs its systems on one generated trace
per workload, writes PNG plots and a markdown table into the output folder, and returns an
``ExperimentReport``; ``README.md`` indexes them next to the paper's numbers.

Modules: the experiments ``overall`` (Fig. 12: end-to-end throughput against verl and slime),
``predictors`` (Fig. 13: predictor accuracy, and rollout time as predictions degrade),
``scheduling`` (Fig. 14: PPS against FCFS, round-robin and least-attained-service), ``placement``
(Fig. 15: trajectory-aware placement against routers), ``resources`` (Fig. 16: annealed
heterogeneous TP against fixed TP), ``overhead`` (s.7.5, Tables 1-2: time per decider event,
resource plan and placement solve) and ``ablation`` (the runs of one ablation, Figs. 15-16); what
they share: ``context`` (scale, traces, simulator, progress), ``scale`` (``QUICK`` or
``PAPER``), ``report`` (``ExperimentReport`` and the markdown written from it), ``common`` (ratio
spans, labels, throughput bar panels), ``plots`` (PNG charts, matplotlib Agg) and ``tables``
(markdown tables).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from heddle.bench.figures import overall, overhead, placement, predictors, resources, scheduling
from heddle.bench.figures.context import FigureRunner, ProgressSink, SilentProgress
from heddle.bench.figures.report import ExperimentReport, write_experiment, write_index
from heddle.bench.figures.scale import PAPER, QUICK, FigureScale
from heddle.bench.figures.tables import Table, TableCell, table
from heddle.workloads import summarize

__all__ = [
    "EXPERIMENTS",
    "PAPER",
    "QUICK",
    "Experiment",
    "ExperimentReport",
    "FigureScale",
    "ProgressSink",
    "experiment_names",
    "run_figures",
]


@dataclass(frozen=True, slots=True)
class Experiment:
    key: str
    title: str
    num_runs: Callable[[FigureScale], int]
    """Progress steps the experiment takes at a scale (simulations, mostly)."""
    run: Callable[[FigureRunner], ExperimentReport]


EXPERIMENTS: dict[str, Experiment] = {
    module.KEY: Experiment(module.KEY, module.TITLE, module.num_runs, module.run)
    for module in (overall, scheduling, placement, resources, predictors, overhead)
}
"""Experiments by key, in the paper's order (the CLI's ``--only`` choices)."""


def experiment_names() -> list[str]:
    return list(EXPERIMENTS)


def run_figures(
    out_dir: Path,
    scale: FigureScale,
    *,
    only: Sequence[str] = (),
    progress: ProgressSink | None = None,
) -> list[ExperimentReport]:
    """Run the experiments named in ``only`` (default: all) at ``scale`` into ``out_dir``:
    each writes its PNGs and ``<key>.md``; then ``README.md`` indexes what ran."""
    unknown = [name for name in only if name not in EXPERIMENTS]
    if unknown:
        raise ValueError(f"unknown experiment {unknown[0]!r}; choose from {', '.join(EXPERIMENTS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    runner = FigureRunner(scale, out_dir, progress or SilentProgress())
    reports: list[ExperimentReport] = []
    for key in only or EXPERIMENTS:
        num_failures = len(runner.failures)
        report = EXPERIMENTS[key].run(runner)
        failures = tuple(f"FAILED: {f}" for f in runner.failures[num_failures:])
        report = replace(report, notes=report.notes + failures)
        write_experiment(report, out_dir)
        reports.append(report)
        # The index is rewritten after every experiment, so a stopped run still has one.
        write_index(reports, out_dir, scale.describe(), workload_table(runner))
    return reports


def workload_table(runner: FigureRunner) -> Table:
    """Shape of each workload's rollout at this scale (``heddle.workloads.summarize``)."""
    names = dict.fromkeys((*runner.scale.workloads, *runner.scale.ablation_workloads))
    headers = ["workload", "trajectories", "groups", "turns mean", "turns max"]
    headers += ["output tok median", "p90", "p99", "max", "max/median"]
    headers += ["tool call s median", "p90", "group R^2"]
    rows: list[list[TableCell]] = []
    for name in names:
        s = summarize(runner.trace(name))
        rows.append(
            [
                name,
                s.num_trajectories,
                s.num_groups,
                s.mean_turns,
                s.max_turns,
                s.median_output_tokens,
                s.p90_output_tokens,
                s.p99_output_tokens,
                s.max_output_tokens,
                s.tail_ratio,
                s.median_tool_call_s,
                s.p90_tool_call_s,
                s.group_explained_variance,
            ]
        )
    return table(headers, rows)
