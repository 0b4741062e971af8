"""The plan estimate over the zoo: estimate vs simulated makespan per TP plan and cell
(``heddle sim sweep --plans``).

Per cell of ``heddle.experiments.sweep`` (the same traces, engine model, predictor and KV scaling as
the system sweep): every candidate plan of the resource planner
(``heddle.policy.resources.plan_choice``) with its estimate and its makespan simulated under the
Heddle bundle on those fixed workers (``heddle.experiments.plan_validation``), and Heddle's own run,
which picks its plan end to end (the estimate, then the check of candidates on the history in
``heddle.sim.planning``). Over cells: the spread of estimate / simulated, the median rank
correlation of the two, and Heddle's pick against the best simulated candidate and the best
homogeneous plan.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from heddle.experiments.cells import Cell
from heddle.experiments.plan_validation import Validation, validate_trace
from heddle.experiments.sweep import SweepConfig, cell_sim_config, cell_traces, map_cells
from heddle.experiments.sweep_report import format_stats as _stats
from heddle.experiments.sweep_summary import LOSS_ABOVE, RatioStats, ratio_stats
from heddle.sim.run import simulate


@dataclass(frozen=True, slots=True)
class CellPlans:
    cell: Cell
    validation: Validation
    heddle_tp_degrees: list[int]
    heddle_makespan_s: float
    wall_s: float

    @property
    def best_candidate_s(self) -> float:
        return min(row.simulated_s for row in self.validation.rows)

    @property
    def best_homogeneous_s(self) -> float:
        return min(r.simulated_s for r in self.validation.rows if len(set(r.tp_degrees)) == 1)

    def summary(self) -> dict[str, Any]:
        return {
            "cell": self.cell.index,
            "split": self.cell.split,
            "family": self.cell.family,
            "model": self.cell.model,
            **self.validation.summary(),
            "heddle_tp_degrees": self.heddle_tp_degrees,
            "heddle_makespan_s": round(self.heddle_makespan_s, 1),
            "heddle_over_best_candidate": self.heddle_makespan_s / self.best_candidate_s,
            "heddle_over_best_homogeneous": self.heddle_makespan_s / self.best_homogeneous_s,
            "wall_s": round(self.wall_s, 1),
        }


def validate_cell(cell: Cell, config: SweepConfig) -> CellPlans:
    """Every candidate plan of ``cell`` estimated and simulated, and Heddle's own run."""
    start = time.perf_counter()
    trace, history = cell_traces(cell, config)
    sim_config, _ = cell_sim_config(cell, config, trace, history)
    label = f"cell {cell.index} {cell.family}"
    validation = validate_trace(label, trace, history, sim_config)
    heddle = simulate(trace, "heddle", sim_config, history=history)
    return CellPlans(
        cell,
        validation,
        heddle.tp_degrees,
        heddle.makespan_s,
        time.perf_counter() - start,
    )


def run_plan_sweep(
    config: SweepConfig, jobs: int = 2, on_done: Callable[[CellPlans], None] | None = None
) -> list[CellPlans]:
    """``validate_cell`` on every cell of ``config``, in cell order."""
    results = map_cells(validate_cell, config, jobs, on_done)
    return sorted(results, key=lambda r: r.cell.index)


@dataclass(frozen=True, slots=True)
class PlanSweepSummary:
    num_cells: int
    num_plans: int
    estimate_over_simulated: dict[str, float]
    """Percentiles (p10, p50, p90) of estimate / simulated makespan over every plan."""
    median_rank_correlation: float | None
    """Over cells with at least three plans and a defined correlation."""
    estimate_pick_over_best_homogeneous: RatioStats | None
    """The estimate's own pick (before the history check), simulated, over the best
    homogeneous plan simulated."""
    heddle_over_best_candidate: RatioStats | None
    heddle_over_best_homogeneous: RatioStats | None
    num_cells_heddle_behind_homogeneous: int
    """Cells where Heddle's run is over 1.02x the best homogeneous plan's."""


def summarise_plans(results: Sequence[CellPlans]) -> PlanSweepSummary:
    ratios = [row.ratio for r in results for row in r.validation.rows]
    quantiles = np.percentile(ratios, [10, 50, 90]) if ratios else [float("nan")] * 3
    correlations = [
        rho
        for r in results
        if (rho := r.validation.rank_correlation) == rho  # drops nan
    ]
    picks = [(r.cell.index, _estimate_pick_s(r) / r.best_homogeneous_s) for r in results]
    over_fix = [(r.cell.index, r.heddle_makespan_s / r.best_homogeneous_s) for r in results]
    return PlanSweepSummary(
        num_cells=len(results),
        num_plans=len(ratios),
        estimate_over_simulated={
            name: float(value) for name, value in zip(("p10", "p50", "p90"), quantiles, strict=True)
        },
        median_rank_correlation=statistics.median(correlations) if correlations else None,
        estimate_pick_over_best_homogeneous=ratio_stats(picks),
        heddle_over_best_candidate=ratio_stats(
            [(r.cell.index, r.heddle_makespan_s / r.best_candidate_s) for r in results]
        ),
        heddle_over_best_homogeneous=ratio_stats(over_fix),
        num_cells_heddle_behind_homogeneous=sum(1 for _, v in over_fix if v > LOSS_ABOVE),
    )


def _estimate_pick_s(result: CellPlans) -> float:
    chosen = result.validation.chosen
    return next(r.simulated_s for r in result.validation.rows if r.tp_degrees == chosen)


def plan_label(tp_degrees: Sequence[int]) -> str:
    """``[4, 4, 1, 1, 1]`` -> ``"2xTP4 3xTP1"``."""
    counts = {tp: list(tp_degrees).count(tp) for tp in sorted(set(tp_degrees), reverse=True)}
    return " ".join(f"{n}xTP{tp}" for tp, n in counts.items())


def plan_markdown(config: SweepConfig, results: Sequence[CellPlans]) -> str:
    """The summary, then one row per cell."""
    s = summarise_plans(results)
    q = s.estimate_over_simulated
    rho = "-" if s.median_rank_correlation is None else f"{s.median_rank_correlation:.2f}"
    lines = [
        "# Plan estimate over the zoo",
        "",
        f"Engine model `{config.engine_model}`, predictor `{config.predictor}`, "
        f"{s.num_cells} cells, {s.num_plans} plans. Ratios are makespans.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| estimate / simulated, p10 / p50 / p90 | {q['p10']:.2f} / {q['p50']:.2f} / "
        f"{q['p90']:.2f} |",
        f"| median rank correlation (estimate, simulated) | {rho} |",
        "| estimate's pick / best homogeneous: geomean / worst | "
        f"{_stats(s.estimate_pick_over_best_homogeneous)} |",
        f"| heddle / best candidate: geomean / worst | {_stats(s.heddle_over_best_candidate)} |",
        "| heddle / best homogeneous: geomean / worst | "
        f"{_stats(s.heddle_over_best_homogeneous)} |",
        f"| cells heddle > 1.02x best homogeneous | {s.num_cells_heddle_behind_homogeneous} |",
        "",
        "| cell | family | model | GPUs | plans | rank corr | estimate / simulated (min-max) "
        "| estimate's pick | heddle's plan | heddle / best candidate | heddle / best homogeneous |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rows = r.validation.rows
        low, high = min(row.ratio for row in rows), max(row.ratio for row in rows)
        cells = [
            str(r.cell.index),
            r.cell.family,
            r.cell.model,
            str(r.cell.num_gpus),
            str(len(rows)),
            f"{r.validation.rank_correlation:.2f}",
            f"{low:.2f}-{high:.2f}",
            plan_label(r.validation.chosen),
            plan_label(r.heddle_tp_degrees),
            f"{r.heddle_makespan_s / r.best_candidate_s:.3f}",
            f"{r.heddle_makespan_s / r.best_homogeneous_s:.3f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plan_sweep_document(
    config: SweepConfig, results: Sequence[CellPlans], wall_s: float
) -> dict[str, Any]:
    """The ``--plans --json`` object."""
    return {
        "config": asdict(config),
        "wall_s": wall_s,
        "cells": [r.summary() for r in results],
        "summary": asdict(summarise_plans(results)),
    }


def write_plan_figure(results: Sequence[CellPlans], path: Path) -> None:
    """Simulated against estimated makespan of every plan (log-log), by family; Heddle's pick
    circled."""
    import matplotlib  # lazily: only the figure needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 5.2))
    families = sorted({r.cell.family for r in results})
    colours = {family: f"C{index}" for index, family in enumerate(families)}
    for r in results:
        colour = colours[r.cell.family]
        rows = r.validation.rows
        axes.scatter([x.simulated_s for x in rows], [x.estimate_s for x in rows], c=colour, s=10)
        picked = [x for x in rows if x.tp_degrees == r.heddle_tp_degrees]
        axes.scatter(
            [x.simulated_s for x in picked],
            [x.estimate_s for x in picked],
            facecolors="none",
            edgecolors="black",
            s=50,
        )
    for family, colour in colours.items():
        axes.scatter([], [], color=colour, label=family)
    low = min((x.simulated_s for r in results for x in r.validation.rows), default=1.0)
    high = max((x.simulated_s for r in results for x in r.validation.rows), default=10.0)
    axes.plot([low, high], [low, high], color="grey", linewidth=0.8)
    axes.set(xscale="log", yscale="log", xlabel="simulated makespan (s)", ylabel="estimate (s)")
    axes.set_title("plan estimate vs simulation (circled: heddle's plan)", fontsize=10)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
