"""The hunter's worst cells into the regression corpus (``heddle sim hunt --add-to-corpus K``).

Works on the hunt's ``--json`` document (``heddle.experiments.hunt_report``), so the cells of a hunt
run elsewhere (``--jobs 16`` on a bigger machine) are added from its output alone: a record holds
the point (parameters, seed, cluster, history) and the hunt's ``max_steps``, and the traces are
drawn again from them, as the hunt drew them.

Only confirmed cells are added (the search's maximum of noisy samples is biased up), worst
first by the larger of heddle / best baseline and heddle / best ablation, only losses (that
ratio above ``LOSS_ABOVE``, the sweep's 2%), and never two that are the same finding
(``heddle.experiments.hunt.is_same_finding`` on their search makespans). An entry is named ``wide-``
and the first 10 hex digits of the SHA-256 of its point, so adding the same cell twice finds it
there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from heddle.experiments.corpus import CorpusEntry, write_entry
from heddle.experiments.hunt import is_same_finding
from heddle.experiments.hunt_space import HuntPoint
from heddle.experiments.sweep_summary import LOSS_ABOVE
from heddle.workloads.history import history_kind
from heddle.workloads.zoo_wide import WideParams


def point_of(record: Mapping[str, Any]) -> HuntPoint:
    """The point of a cell's record (``hunt_report.finding_record``)."""
    return HuntPoint(
        params=WideParams(**record["params"]),
        seed=int(record["seed"]),
        model=record["model"],
        num_gpus=int(record["num_gpus_asked"]),
        trajectories_per_gpu=float(record["trajectories_per_gpu_asked"]),
        kv_ratio=float(record["kv_ratio_target"]),
        history=history_kind(record["history"]),
    )


def entry_name(point: HuntPoint) -> str:
    key = json.dumps(
        {
            "params": {k: getattr(point.params, k) for k in WideParams.RANGES},
            "seed": point.seed,
            "model": point.model,
            "num_gpus": point.num_gpus,
            "trajectories_per_gpu": point.trajectories_per_gpu,
            "kv_ratio": point.kv_ratio,
            "history": point.history,
        },
        sort_keys=True,
    )
    return "wide-" + hashlib.sha256(key.encode()).hexdigest()[:10]


def confirmed_losses(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The document's confirmed cells that lose by more than ``LOSS_ABOVE``, worst first."""

    def loss(record: Mapping[str, Any]) -> float:
        judged = record["confirmed"]
        ratios = [judged["heddle_over_best_baseline"] or 0.0, *judged["heddle_over"].values()]
        return max(ratios)

    records = [r for r in document["worst_confirmed"] if r["confirmed"] and loss(r) > LOSS_ABOVE]
    chosen: list[dict[str, Any]] = []
    for record in sorted(records, key=lambda r: (-loss(r), r["index"])):
        makespans = record["search"]["makespans_s"]
        if not any(is_same_finding(makespans, c["search"]["makespans_s"]) for c in chosen):
            chosen.append(record)
    return chosen


def add_to_corpus(
    document: Mapping[str, Any], directory: Path, count: int, provenance: Mapping[str, Any]
) -> tuple[list[CorpusEntry], list[str]]:
    """Up to ``count`` of the document's confirmed losses as new entries under ``directory``
    (``provenance``, e.g. the command and commit, goes into each entry's ``found``); returns
    the entries written and the names already there."""
    max_steps = int(document["config"]["max_steps"])
    written: list[CorpusEntry] = []
    existing: list[str] = []
    for record in confirmed_losses(document)[:count]:
        point = point_of(record)
        name = entry_name(point)
        if (directory / name).exists():
            existing.append(name)
            continue
        cell = point.cell(record["index"], max_steps)
        traces = point.source(max_steps).traces(cell, 0)
        found = {
            **provenance,
            "hunt_cell": record["index"],
            "search": record["search"],
            "confirmed": record["confirmed"],
        }
        written.append(write_entry(directory, name, point, cell.num_gpus, traces, found))
    return written, existing
