"""Ratios per sweep cell and their summary over cells (``heddle sim sweep``).

Per cell: heddle over the best baseline (the ``baseline`` bundle of least makespan, named),
heddle over each ablation and each variant (``SystemSpec.kind``), each system's makespan over
the cell's lower bound, and the lower bound over the best baseline: the smallest heddle / best
baseline that any system could reach in that cell (its headroom). Over cells, per split (all:
the zoo's tuning and held-out cells; tuning; heldout; corpus: the hunter's regression cells,
never in ``all``, since they were chosen for heddle's losses): the geometric mean and the worst
(largest) of each ratio, the median makespan / lower bound, and the number of cells where
heddle is under 0.98x the best baseline (a win) or over 1.02x (a loss). The zoo's splits take
the cells judged with one history (``summarise_sweep(history=...)``; the sweep's JSON has a
summary per history it ran), the corpus split every corpus cell (each with its own).

With replications (``SweepConfig.replications``) every makespan above is a system's mean over
them, so the best baseline is the one of least mean makespan; each cell also reports heddle
over the best baseline of each replication alone (the single-sample reading), and the summary
counts the cells heddle loses by more than 2% in every replication.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from heddle.control.systems import SYSTEMS
from heddle.experiments.sweep import CellResult, SweepConfig, SystemRun
from heddle.workloads.history import HistoryKind

HEDDLE = "heddle"
WIN_BELOW = 0.98
LOSS_ABOVE = 1.02


@dataclass(frozen=True, slots=True)
class CellRatios:
    best_baseline: str | None
    heddle_over_best_baseline: float | None
    heddle_over: dict[str, float]
    """heddle's makespan over each ablation's and variant's."""
    makespan_over_lb: dict[str, float]
    lb_over_best_baseline: float | None
    """The lower bound over the best baseline's makespan: no system's heddle / best baseline
    can go below it."""
    heddle_over_best_baseline_by_replication: list[float] = field(default_factory=list)
    """Per replication, heddle over that replication's fastest baseline (empty with one)."""
    heddle_over_reference: float | None = None
    """heddle over the best-known reference (``heddle.experiments.reference``; None: not run): what
    prediction and plan choice cost it. Times ``reference_over_lb`` (what scheduling leaves)
    it is heddle's makespan over the lower bound."""
    reference_over_lb: float | None = None


def cell_ratios(result: CellResult) -> CellRatios:
    runs = result.runs
    baselines = [name for name in runs if SYSTEMS[name].kind == "baseline"]
    best = min(baselines, key=lambda name: (runs[name].makespan_s, name)) if baselines else None
    heddle = runs.get(HEDDLE)
    over_best = heddle.makespan_s / runs[best].makespan_s if heddle and best else None
    over = {
        name: heddle.makespan_s / run.makespan_s
        for name, run in runs.items()
        if heddle and SYSTEMS[name].kind in ("ablation", "variant")
    }
    reference = result.reference_s
    return CellRatios(
        best_baseline=best,
        heddle_over_best_baseline=over_best,
        heddle_over=over,
        makespan_over_lb={name: run.makespan_over_lb for name, run in runs.items()},
        lb_over_best_baseline=1.0 / runs[best].makespan_over_lb if best else None,
        heddle_over_best_baseline_by_replication=_by_replication(runs, baselines),
        heddle_over_reference=heddle.makespan_s / reference if heddle and reference else None,
        reference_over_lb=(
            reference / result.lower_bound_s if reference and result.lower_bound_s else None
        ),
    )


def _by_replication(runs: Mapping[str, SystemRun], baselines: Sequence[str]) -> list[float]:
    heddle = runs.get(HEDDLE)
    if heddle is None or not baselines or len(heddle.makespans_s) < 2:
        return []
    count = len(heddle.makespans_s)
    if any(len(runs[name].makespans_s) != count for name in baselines):
        return []
    return [
        heddle.makespans_s[index] / min(runs[name].makespans_s[index] for name in baselines)
        for index in range(count)
    ]


@dataclass(frozen=True, slots=True)
class RatioStats:
    num_cells: int
    geomean: float
    worst: float
    """The largest ratio (heddle's worst cell)."""
    worst_cell: int


def ratio_stats(values: Sequence[tuple[int, float]]) -> RatioStats | None:
    """Geometric mean and largest of ``(cell index, ratio)`` pairs; None when empty."""
    if not values:
        return None
    geomean = math.exp(sum(math.log(v) for _, v in values) / len(values))
    worst_cell, worst = max(values, key=lambda pair: (pair[1], -pair[0]))
    return RatioStats(len(values), geomean, worst, worst_cell)


@dataclass(frozen=True, slots=True)
class SplitSummary:
    num_cells: int
    heddle_over_best_baseline: RatioStats | None
    heddle_over: dict[str, RatioStats]
    median_makespan_over_lb: dict[str, float]
    num_heddle_wins: int
    """Cells where heddle < 0.98x the best baseline."""
    num_heddle_losses: int
    """Cells where heddle > 1.02x the best baseline."""
    num_heddle_losses_every_replication: int
    """Cells where heddle > 1.02x the fastest baseline in every replication (with
    replications; else the same as ``num_heddle_losses``)."""
    num_errors: int
    """System runs that raised (left out of the ratios)."""
    lb_over_best_baseline: RatioStats | None
    """Its geometric mean is the least heddle / best baseline geomean that any system could
    reach on these cells (one that met the lower bound in every cell)."""
    heddle_over_reference: RatioStats | None = None
    """Over the cells that ran the reference (``SweepConfig.reference``)."""
    reference_over_lb: RatioStats | None = None


def summarise_split(results: Sequence[CellResult]) -> SplitSummary:
    ratios = [(r.cell.index, cell_ratios(r)) for r in results]
    versus = [(i, c.heddle_over_best_baseline) for i, c in ratios]
    versus_best = [(i, v) for i, v in versus if v is not None]
    names = sorted({name for _, c in ratios for name in c.heddle_over})
    over = {
        name: stats
        for name in names
        if (
            stats := ratio_stats(
                [(i, c.heddle_over[name]) for i, c in ratios if name in c.heddle_over]
            )
        )
    }
    systems = sorted({name for _, c in ratios for name in c.makespan_over_lb})
    median_lb = {
        name: statistics.median(
            c.makespan_over_lb[name] for _, c in ratios if name in c.makespan_over_lb
        )
        for name in systems
    }
    return SplitSummary(
        num_cells=len(results),
        heddle_over_best_baseline=ratio_stats(versus_best),
        heddle_over=over,
        median_makespan_over_lb=median_lb,
        num_heddle_wins=sum(1 for _, v in versus_best if v < WIN_BELOW),
        num_heddle_losses=sum(1 for _, v in versus_best if v > LOSS_ABOVE),
        num_heddle_losses_every_replication=sum(1 for _, c in ratios if _lost_in_every(c)),
        num_errors=sum(len(r.errors) for r in results),
        lb_over_best_baseline=ratio_stats(
            [(i, c.lb_over_best_baseline) for i, c in ratios if c.lb_over_best_baseline]
        ),
        heddle_over_reference=ratio_stats(
            [(i, c.heddle_over_reference) for i, c in ratios if c.heddle_over_reference]
        ),
        reference_over_lb=ratio_stats(
            [(i, c.reference_over_lb) for i, c in ratios if c.reference_over_lb]
        ),
    )


def _lost_in_every(ratios: CellRatios) -> bool:
    """Whether heddle is over ``LOSS_ABOVE`` of the fastest baseline in every replication (the
    only one when the cell ran one)."""
    if ratios.heddle_over_best_baseline is None:
        return False
    samples = ratios.heddle_over_best_baseline_by_replication or [ratios.heddle_over_best_baseline]
    return all(ratio > LOSS_ABOVE for ratio in samples)


def summarise_sweep(
    results: Sequence[CellResult], history: HistoryKind | None = None
) -> dict[str, SplitSummary]:
    """The summary of the zoo's cells (judged with ``history``; None: every one), of each of
    its splits, and of the corpus' cells."""
    zoo = [
        r for r in results if r.split != "corpus" and (history is None or r.cell.history == history)
    ]
    return {
        "all": summarise_split(zoo),
        "tuning": summarise_split([r for r in zoo if r.split == "tuning"]),
        "heldout": summarise_split([r for r in zoo if r.split == "heldout"]),
        "corpus": summarise_split([r for r in results if r.split == "corpus"]),
    }


def summaries_by_history(
    config: SweepConfig, results: Sequence[CellResult]
) -> dict[str, dict[str, SplitSummary]]:
    """``summarise_sweep`` for each history the sweep judged its zoo cells with."""
    return {history: summarise_sweep(results, history) for history in config.histories}


def sweep_document(
    config: SweepConfig, results: Sequence[CellResult], wall_s: float, jobs: int
) -> dict[str, Any]:
    """The ``--json`` object: the config (engine model and predictor included), the cells with
    their ratios, the summary per split of the first history's cells (``summary``) and of each
    history's (``summary_by_history``)."""
    cells = [{**asdict(r), "ratios": asdict(cell_ratios(r))} for r in results]
    by_history = {
        history: {split: asdict(s) for split, s in summary.items()}
        for history, summary in summaries_by_history(config, results).items()
    }
    return {
        "config": {**asdict(config), "jobs": jobs},
        "wall_s": wall_s,
        "cpu_s": sum(r.cpu_s for r in results),
        "cells": cells,
        "summary": by_history[config.histories[0]],
        "summary_by_history": by_history,
    }
