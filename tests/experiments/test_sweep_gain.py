"""Per-family predictor gain between two sweep documents: matched cells only, ratios by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from heddle.experiments.sweep_gain import main, predictor_gain


def cell(index: int, family: str, makespans: dict[str, float], wall_s: float) -> dict[str, Any]:
    return {
        "cell": {
            "index": index,
            "family": family,
            "draw_seed": 100 + index,
            "model": "qwen3-8b",
            "num_gpus": 8,
            "kv_ratio": 0.5,
        },
        "runs": {name: {"makespan_s": m} for name, m in makespans.items()},
        "wall_s": wall_s,
    }


BASE = {
    "cells": [
        cell(0, "swe", {"heddle": 100.0}, 10.0),
        cell(1, "search", {"heddle": 200.0}, 20.0),
        cell(2, "swe", {"heddle": 50.0}, 5.0),
        cell(3, "math", {"verl": 50.0}, 5.0),
    ]
}
OTHER = {
    "cells": [
        cell(0, "swe", {"heddle": 90.0}, 30.0),
        cell(1, "search", {"heddle": 100.0}, 60.0),
        cell(2, "swe", {"heddle": 55.0}, 15.0),
        cell(3, "math", {"heddle": 10.0}, 5.0),  # heddle did not run in the base: left out
        cell(4, "web", {"heddle": 10.0}, 5.0),  # not in the base: left out
    ]
}


def test_ratios_per_family_over_the_matched_cells() -> None:
    gain = predictor_gain(BASE, OTHER)
    assert set(gain) == {"search", "swe"}
    assert gain["search"]["cells"] == [[1, 0.5]] and gain["search"]["geomean"] == 0.5
    swe = gain["swe"]
    assert swe["cells"] == [[0, 0.9], [2, 1.1]]
    assert swe["geomean"] == pytest.approx(math.sqrt(0.9 * 1.1), abs=1e-4)
    assert (swe["best"], swe["worst"]) == (0.9, 1.1)
    assert swe["wall_s"] == [15.0, 45.0]


def test_a_cell_of_another_draw_is_not_matched() -> None:
    moved = {"cells": [dict(OTHER["cells"][0], cell={**OTHER["cells"][0]["cell"], "draw_seed": 1})]}
    with pytest.raises(ValueError, match="share no cell"):
        predictor_gain(BASE, moved)


def test_the_command_reads_the_last_json_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.json").write_text("progress\n" + json.dumps(BASE))
    (tmp_path / "b.json").write_text(json.dumps(OTHER))
    main([str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert json.loads(capsys.readouterr().out) == predictor_gain(BASE, OTHER)
