"""What a hunt reports (``heddle sim hunt``): the ``--json`` document (its budget, its wall time,
the headline ``worst`` figures, the worst cells with every ratio, makespan and parameter) and a
markdown table of the worst.

The headline (``worst``): the largest heddle / best baseline and heddle / best ``heddle-*``
ablation over the searched cells, each with its cell, the system it loses to and the epochs
behind it: a confirmed cell counts with its confirmation's figure (the search's one-epoch
maximum is biased up), an unconfirmed one with its search figure.

A cell's record: the point (parameters, seed, cluster, history), the size it ran at (the
trajectories and steps kept within the hunter's ``max_steps``, the GPUs and the density per GPU,
the KV ratio reached), heddle over the best baseline (named) and over each ``heddle-*`` ablation,
every system's makespan and the lower bound, and for confirmed cells the same on the
confirmation's epochs (makespans averaged; heddle over the fastest baseline of each epoch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from heddle.experiments.hunt import Hunt, HuntFinding, ablation_ratios, worst_of_both
from heddle.experiments.sweep import CellResult
from heddle.experiments.sweep_summary import cell_ratios, ratio_stats

NUM_WORST = 5


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _judgement(result: CellResult) -> dict[str, Any]:
    ratios = cell_ratios(result)
    return {
        "replications": len(result.lower_bounds_s) or 1,
        "best_baseline": ratios.best_baseline,
        "heddle_over_best_baseline": _round(ratios.heddle_over_best_baseline),
        "heddle_over_best_baseline_by_replication": [
            _round(v) for v in ratios.heddle_over_best_baseline_by_replication
        ],
        "heddle_over": {n: _round(r) for n, r in sorted(ablation_ratios(ratios).items())},
        "makespans_s": {n: round(run.makespan_s, 2) for n, run in sorted(result.runs.items())},
        "lower_bound_s": _round(result.lower_bound_s, 2),
        "errors": result.errors,
    }


def finding_record(finding: HuntFinding) -> dict[str, Any]:
    """A cell's full record (the module doc)."""
    point, result = finding.point, finding.result
    return {
        "index": finding.index,
        "phase": finding.phase,
        "parent": finding.parent,
        "score": _round(finding.score),
        "seed": point.seed,
        "model": point.model,
        "num_gpus_asked": point.num_gpus,
        "num_gpus": result.cell.num_gpus,
        "history": point.history,
        "trajectories_per_gpu_asked": point.trajectories_per_gpu,  # unrounded: the point
        "num_trajectories": result.num_trajectories,
        "trajectories_per_gpu": round(result.num_trajectories / result.cell.num_gpus, 3),
        "num_steps": result.num_steps,
        "kv_ratio_target": point.kv_ratio,
        "kv_ratio": _round(result.kv.ratio, 3),
        "params": asdict(point.params),
        "search": _judgement(result),
        "confirmed": _judgement(finding.confirmed) if finding.confirmed else None,
        "cpu_s": round(result.cpu_s, 2),
    }


def _brief(finding: HuntFinding) -> dict[str, Any]:
    return {
        "index": finding.index,
        "phase": finding.phase,
        "parent": finding.parent,
        "heddle_over_best_baseline": _round(finding.over_best_baseline),
        "heddle_over_best_ablation": _round(finding.over_best_ablation),
        "num_errors": len(finding.result.errors),
        "cpu_s": round(finding.result.cpu_s, 2),
        "confirm_cpu_s": round(finding.confirmed.cpu_s, 2) if finding.confirmed else None,
    }


def _ranked(findings: Sequence[HuntFinding], key: str) -> list[HuntFinding]:
    def value(finding: HuntFinding) -> float:
        return float(getattr(finding, key))

    return sorted(findings, key=lambda f: (-value(f), f.index))[:NUM_WORST]


def _worst_over_baseline(findings: Sequence[HuntFinding]) -> dict[str, Any] | None:
    ranked = _ranked(findings, "over_best_baseline")
    if not ranked or ranked[0].over_best_baseline <= 0:
        return None
    worst = ranked[0]
    return {
        "value": _round(worst.over_best_baseline),
        "cell": worst.index,
        "against": worst.ratios.best_baseline,
        "epochs": _epochs(worst),
    }


def _worst_over_ablation(findings: Sequence[HuntFinding]) -> dict[str, Any] | None:
    ranked = _ranked(findings, "over_best_ablation")
    if not ranked or ranked[0].over_best_ablation <= 0:
        return None
    worst = ranked[0]
    ablations = ablation_ratios(worst.ratios)
    return {
        "value": _round(worst.over_best_ablation),
        "cell": worst.index,
        "against": max(ablations, key=lambda name: (ablations[name], name)),
        "epochs": _epochs(worst),
    }


def _epochs(finding: HuntFinding) -> int:
    return len(finding.judged.lower_bounds_s) or 1


def hunt_document(hunt: Hunt, jobs: int) -> dict[str, Any]:
    """The ``--json`` object."""
    findings = hunt.findings
    confirmed = [f for f in findings if f.confirmed is not None]
    versus = [(f.index, f.over_best_baseline) for f in findings if f.over_best_baseline > 0]
    return {
        "budget": hunt.config.budget,
        "config": {**asdict(hunt.config), "systems": list(hunt.config.sweep_config().systems)},
        "jobs": jobs,
        "wall_s": round(hunt.wall_s, 1),
        "cpu_s": round(hunt.cpu_s, 1),
        "num_cells": len(findings),
        "num_confirmed": len(confirmed),
        "num_system_errors": sum(len(f.result.errors) for f in findings),
        "worst": {
            "heddle_over_best_baseline": _worst_over_baseline(findings),
            "heddle_over_best_ablation": _worst_over_ablation(findings),
        },
        "heddle_over_best_baseline_geomean": _round(
            stats.geomean if (stats := ratio_stats(versus)) else None
        ),
        "worst_confirmed": [finding_record(f) for f in _ranked(confirmed, "score")],
        "worst_vs_baseline": [finding_record(f) for f in _ranked(findings, "over_best_baseline")],
        "worst_vs_ablation": [finding_record(f) for f in _ranked(findings, "over_best_ablation")],
        "cells": [_brief(f) for f in findings],
    }


def hunt_markdown(hunt: Hunt) -> str:
    """The worst cells (the parents' rule: alternately by each ratio) as a table."""
    lines = [
        f"# Hunt: budget {hunt.config.budget}, seed {hunt.config.seed}, "
        f"{hunt.wall_s:.0f} s wall, {hunt.cpu_s:.0f} CPU s",
        "",
        _headline("heddle / best baseline", _worst_over_baseline(hunt.findings)),
        _headline("heddle / best heddle-* ablation", _worst_over_ablation(hunt.findings)),
        "",
        "| cell | phase | model x GPUs | traj/GPU | steps | KV ratio | history | heddle / best "
        "baseline | heddle / best ablation | confirmed (epochs) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for finding in worst_of_both(hunt.findings, 2 * NUM_WORST):
        lines.append(_row(finding))
    lines += ["", "Ratios are makespans: above 1, heddle is slower."]
    return "\n".join(lines) + "\n"


def _headline(ratio: str, worst: dict[str, Any] | None) -> str:
    if worst is None:
        return f"- Worst {ratio}: - (no cell ran both)"
    return (
        f"- Worst {ratio}: **{worst['value']:.3f}** (cell {worst['cell']}, "
        f"to {worst['against']}, {worst['epochs']} epoch(s))"
    )


def _row(finding: HuntFinding) -> str:
    point, result = finding.point, finding.result
    search = cell_ratios(result)
    best = search.heddle_over_best_baseline
    ablations = ablation_ratios(search)
    worst_ablation = max(ablations, key=lambda n: ablations[n], default=None)
    confirmed = "-"
    if finding.confirmed is not None:
        confirmed = (
            f"{finding.over_best_baseline:.3f} / {finding.over_best_ablation:.3f} "
            f"({len(finding.confirmed.lower_bounds_s)})"
        )
    cells = [
        str(finding.index),
        finding.phase,
        f"{point.model} x {result.cell.num_gpus}",
        f"{result.num_trajectories / result.cell.num_gpus:.1f}",
        str(result.num_steps),
        f"{result.kv.ratio:.2f}",
        point.history,
        f"{best:.3f} ({search.best_baseline})" if best else "-",
        f"{ablations[worst_ablation]:.3f} ({worst_ablation})" if worst_ablation else "-",
        confirmed,
    ]
    return "| " + " | ".join(cells) + " |"
