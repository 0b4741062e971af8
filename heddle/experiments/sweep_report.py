"""The sweep's human-readable outputs: a markdown report and a figure (``heddle sim sweep``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from heddle.experiments.sweep import CellResult, SweepConfig
from heddle.experiments.sweep_summary import (
    HEDDLE,
    RatioStats,
    SplitSummary,
    cell_ratios,
    summaries_by_history,
    summarise_sweep,
)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_stats(stats: RatioStats | None) -> str:
    """``geomean / worst (cell k)``, or ``-``."""
    if stats is None:
        return "-"
    return f"{stats.geomean:.3f} / {stats.worst:.3f} (cell {stats.worst_cell})"


def _cells_table(results: Sequence[CellResult], others: list[str]) -> list[str]:
    header = [
        "cell",
        "split",
        "history",
        "family",
        "model",
        "GPUs",
        "traj (per GPU)",
        "KV ratio (target)",
        "best baseline",
    ]
    header += ["heddle / best", "per replication"]
    header += [*(f"heddle / {name}" for name in others), "heddle x LB", "errors"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        cell, ratios = result.cell, cell_ratios(result)
        row = [
            str(cell.index),
            result.split,
            cell.history,
            cell.family,
            cell.model,
            str(cell.num_gpus),
            f"{result.num_trajectories} ({result.num_trajectories / cell.num_gpus:.1f})",
            f"{result.kv.ratio:.2f} ({cell.kv_ratio:g})",
            ratios.best_baseline or "-",
            _ratio(ratios.heddle_over_best_baseline),
            " ".join(_ratio(v) for v in ratios.heddle_over_best_baseline_by_replication) or "-",
            *(_ratio(ratios.heddle_over.get(name)) for name in others),
            _ratio(ratios.makespan_over_lb.get(HEDDLE)),
            ", ".join(sorted(result.errors)) or "",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _summary_table(summary: dict[str, SplitSummary]) -> list[str]:
    splits = list(summary)
    lines = ["| figure | " + " | ".join(splits) + " |", "|---|" + "---|" * len(splits)]

    def add(label: str, values: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(values) + " |")

    add("cells", [str(summary[s].num_cells) for s in splits])
    add(
        "heddle / best baseline: geomean / worst",
        [format_stats(summary[s].heddle_over_best_baseline) for s in splits],
    )
    add(
        "LB / best baseline (headroom: the best any system could reach): geomean / largest",
        [format_stats(summary[s].lb_over_best_baseline) for s in splits],
    )
    if any(summary[s].heddle_over_reference for s in splits):
        add(
            "heddle / best-known reference (not a system): geomean / worst",
            [format_stats(summary[s].heddle_over_reference) for s in splits],
        )
        add(
            "reference / LB: geomean / largest",
            [format_stats(summary[s].reference_over_lb) for s in splits],
        )
    add("cells heddle < 0.98x best baseline", [str(summary[s].num_heddle_wins) for s in splits])
    add("cells heddle > 1.02x best baseline", [str(summary[s].num_heddle_losses) for s in splits])
    add(
        "... in every replication",
        [str(summary[s].num_heddle_losses_every_replication) for s in splits],
    )
    names = sorted({name for s in splits for name in summary[s].heddle_over})
    for name in names:
        add(
            f"heddle / {name}: geomean / worst",
            [format_stats(summary[s].heddle_over.get(name)) for s in splits],
        )
    systems = sorted({name for s in splits for name in summary[s].median_makespan_over_lb})
    for name in systems:
        add(
            f"median {name} makespan / LB",
            [_ratio(summary[s].median_makespan_over_lb.get(name)) for s in splits],
        )
    add("failed system runs", [str(summary[s].num_errors) for s in splits])
    return lines


def markdown_report(
    results: Sequence[CellResult], config: SweepConfig | None = None, title: str = "Zoo sweep"
) -> str:
    """The settings, the summary per split, then one row per cell."""
    others = sorted({name for r in results for name in cell_ratios(r).heddle_over})
    lines = [f"# {title}", ""]
    if config is not None:
        lines += [
            f"Engine model `{config.engine_model}`, predictor `{config.predictor}`, hardware "
            f"`{config.hardware}`, {config.steps_per_cell} steps per cell, base seed "
            f"{config.seed}, split `{config.split}`, histories "
            f"{', '.join(f'`{h}`' for h in config.histories)}, "
            f"{config.replications} replication(s) "
            "(makespans are means over them). KV ratio: the trajectories' summed final "
            "contexts over the cluster's KV (scaled down to reach the target; see "
            "`heddle.experiments.kv_pressure`).",
            "",
        ]
    summaries = (
        summaries_by_history(config, results)
        if config is not None
        else {"every history": summarise_sweep(results)}
    )
    for history, summary in summaries.items():
        lines += [f"## Summary (zoo cells judged with history `{history}`)", ""]
        lines += [*_summary_table(summary), ""]
    lines += [
        "Ratios are makespans: below 1, heddle is faster. The corpus column is the hunter's "
        "regression cells, each with its own history (never in `all`).",
        "",
        "## Cells",
        "",
    ]
    lines += _cells_table(results, others)
    return "\n".join(lines) + "\n"


def write_figure(results: Sequence[CellResult], path: Path) -> None:
    """Left: heddle / best baseline per cell, by family (held-out cells hollow). Right: the
    distribution of heddle / each ablation and variant over cells."""
    import matplotlib  # lazily: only the figure needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    families = sorted({_family(r) for r in results})
    colours = {family: f"C{index}" for index, family in enumerate(families)}
    for result in results:
        ratio = cell_ratios(result).heddle_over_best_baseline
        if ratio is None:
            continue
        colour = colours[_family(result)]
        face = "none" if result.split == "heldout" else colour
        left.scatter(result.cell.index, ratio, edgecolors=colour, facecolors=face, s=28)
    for family, colour in colours.items():
        left.scatter([], [], color=colour, label=family)
    left.axhline(1.0, color="grey", linewidth=0.8)
    left.set(xlabel="cell (hollow: held out)", ylabel="heddle / best baseline (makespan)")
    left.legend(fontsize=8)
    others = sorted({name for r in results for name in cell_ratios(r).heddle_over})
    data = [
        [cell_ratios(r).heddle_over[n] for r in results if n in cell_ratios(r).heddle_over]
        for n in others
    ]
    if others:
        right.boxplot(data)
        right.set_xticks(range(1, len(others) + 1), others)
        right.tick_params(axis="x", rotation=45, labelsize=8)
    right.axhline(1.0, color="grey", linewidth=0.8)
    right.set(ylabel="heddle / system (makespan)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _family(result: CellResult) -> str:
    """The figure's colour key: the zoo family, or ``corpus`` for every corpus cell."""
    return "corpus" if result.split == "corpus" else result.cell.family
