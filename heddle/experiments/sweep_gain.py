"""What one predictor gains over another in the sweep, family by family: two ``heddle sim sweep
--json`` documents of the same cells (one per predictor), and per family the system's makespan
with the second predictor over its makespan with the first.

    python -m heddle.experiments.sweep_gain online.json context.json [--system heddle]

prints one JSON object: per family, the cells (index, ratio), the geometric mean, the best
(least) and the worst (largest) ratio, and the cells' wall seconds under each predictor.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _cell_key(cell: Mapping[str, Any]) -> tuple[object, ...]:
    c = cell["cell"]
    history = c.get("history", "same")  # sweeps before histories judged with the same prompts
    return (
        c["index"],
        c["family"],
        c["draw_seed"],
        c["model"],
        c["num_gpus"],
        c["kv_ratio"],
        history,
    )


def predictor_gain(
    base: Mapping[str, Any], other: Mapping[str, Any], system: str = "heddle"
) -> dict[str, dict[str, Any]]:
    """Per family, ``system``'s makespan in ``other`` over ``base``, over the cells both ran
    (a cell is matched by its index, family, draw, model, GPUs, KV ratio and history;
    ``ValueError`` if the documents share none)."""
    base_cells = {_cell_key(c): c for c in base["cells"]}
    pairs: dict[str, list[tuple[int, float, float, float]]] = {}
    for cell in other["cells"]:
        match = base_cells.get(_cell_key(cell))
        if match is None or system not in cell["runs"] or system not in match["runs"]:
            continue
        ratio = cell["runs"][system]["makespan_s"] / match["runs"][system]["makespan_s"]
        entry = (cell["cell"]["index"], ratio, match["wall_s"], cell["wall_s"])
        pairs.setdefault(cell["cell"]["family"], []).append(entry)
    if not pairs:
        raise ValueError(f"the two sweeps share no cell that {system} ran in both")
    return {family: _family_gain(entries) for family, entries in sorted(pairs.items())}


def _family_gain(entries: Sequence[tuple[int, float, float, float]]) -> dict[str, Any]:
    ratios = [ratio for _, ratio, _, _ in entries]
    return {
        "cells": [[index, round(ratio, 4)] for index, ratio, _, _ in entries],
        "geomean": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 4),
        "best": round(min(ratios), 4),
        "worst": round(max(ratios), 4),
        "wall_s": [round(sum(e[2] for e in entries), 1), round(sum(e[3] for e in entries), 1)],
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("other", type=Path)
    parser.add_argument("--system", default="heddle")
    args = parser.parse_args(argv)
    documents = [json.loads(path.read_text().splitlines()[-1]) for path in (args.base, args.other)]
    print(json.dumps(predictor_gain(documents[0], documents[1], system=args.system)))


if __name__ == "__main__":
    main()
