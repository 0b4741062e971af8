"""`heddle sim figures`: tables, plots, scales, and a real quick run end to end."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import heddle.cli.sim_figures  # noqa: F401  (registers the command)
from heddle.bench.figures import EXPERIMENTS, QUICK, FigureScale, run_figures
from heddle.bench.figures.common import span
from heddle.bench.figures.overhead import TimedDecider
from heddle.bench.figures.plots import BarPanel, LinePanel, draw_panels, save_panels
from heddle.bench.figures.tables import format_cell, table
from heddle.cli.apps import app
from heddle.control.decider import Output
from heddle.errors import UserError
from heddle.events import Event
from heddle.sim import SimulationError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("cell", "text"),
    [
        (None, "-"),
        ("heddle", "heddle"),
        (3, "3"),
        (12345.6, "12,346"),
        (123.4, "123"),
        (12.34, "12.3"),
        (1.234, "1.23"),
        (0.0071, "0.007"),
        (1e-17, "0.000"),
        (-1e-17, "0.000"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
    ],
)
def test_cells_format_numbers_readably(cell: str | int | float | None, text: str) -> None:
    assert format_cell(cell) == text


def test_markdown_table_aligns_numeric_columns_right() -> None:
    markdown = table(["system", "tok/s"], [["heddle", 2.5], ["verl", None]]).to_markdown()
    assert markdown.splitlines() == [
        "| system | tok/s |",
        "|---|---:|",
        "| heddle | 2.50 |",
        "| verl | - |",
    ]


def test_a_row_of_the_wrong_width_is_rejected() -> None:
    with pytest.raises(ValueError, match="has 1 cells for 2 headers"):
        table(["a", "b"], [[1]])


def test_span_of_ratios() -> None:
    assert span([1.5, 1.1, 1.26]) == "1.10-1.50x"
    assert span([1.2]) == "1.20x"
    assert span([]) == "n/a"


def test_panels_are_saved_as_png(tmp_path: Path) -> None:
    bars = BarPanel("a", ["8B", "14B"], {"heddle": [2.0, 3.0], "verl": [1.0, 1.5]}, "tok/s")
    stacked = BarPanel("b", ["x"], {"queue": [1.0], "tool": [2.0]}, "s", stacked=True)
    lines = LinePanel("c", {"h": ([0.0, 5.0], [3.0, 0.0])}, "t", "n", steps=True, hlines={"r": 1})
    path = save_panels(tmp_path / "sub" / "f.png", "title", [bars, stacked, lines])
    assert path.read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(ValueError, match="at least one panel"):
        save_panels(tmp_path / "g.png", "title", [])


def test_stacked_bars_fit_inside_the_axes() -> None:
    """The y axis reaches the top of the tallest stack (and of the tallest grouped bar)."""
    stacked = BarPanel("s", ["a", "b"], {"q": [1.0, 20.0], "g": [3.0, 1.0], "t": [5.0, 5.0]}, "s")
    stacked = replace(stacked, stacked=True)
    grouped = BarPanel("g", ["a"], {"x": [2.0], "y": [7.0]}, "s")
    figure = draw_panels("t", [stacked, grouped])
    assert figure.axes[0].get_ylim()[1] >= 26.0
    assert figure.axes[1].get_ylim()[1] >= 7.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_gpus": 4}, "num_gpus must be >= 8"),
        ({"num_trajectories": 0}, "num_trajectories must be >= 1"),
        ({"models": ("gpt-5",)}, "unknown model"),
        ({"ablation_workloads": ("chess",)}, "unknown workload"),
        ({"sigmas": ()}, "sigmas"),
    ],
)
def test_bad_scales_raise(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace(QUICK, **changes)  # type: ignore[arg-type]


def test_resized_keeps_the_rest_of_the_scale() -> None:
    scale = QUICK.resized(num_trajectories=64, num_gpus=16, seed=3)
    assert (scale.num_trajectories, scale.num_gpus, scale.seed) == (64, 16, 3)
    assert scale.models == QUICK.models
    assert QUICK.resized() == QUICK


class _Echo:
    name = "echo"
    handles: frozenset[type[Event]] = frozenset()

    def decide(self, event: Event) -> list[Output]:
        return [event]


def test_timed_decider_passes_outputs_through_and_counts_events() -> None:
    timed = TimedDecider(_Echo())
    marker = object()
    assert timed.decide(marker) == [marker]  # type: ignore[arg-type]
    assert timed.decide(marker) == [marker]  # type: ignore[arg-type]
    assert (timed.name, timed.num_events) == ("echo", 2)
    assert timed.total_s >= 0


def test_quick_run_writes_every_experiment(tmp_path: Path) -> None:
    """The real command at the quick scale: every file exists and every link resolves."""
    out = tmp_path / "figures"
    result = CliRunner().invoke(app, ["sim", "figures", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    readme = (out / "README.md").read_text()
    assert "scale `quick`: 32 trajectories per rollout, 8 x H200 GPUs" in readme
    for workload in QUICK.workloads:
        assert f"| {workload} | 32 |" in readme  # the workload shape table
    links = re.findall(r"\]\(([^)]+)\)", readme)
    for key in EXPERIMENTS:
        assert f"{key}.md" in links
    for link in links:
        assert (out / link).is_file(), link
    for png in out.glob("*.png"):
        assert png.read_bytes().startswith(PNG_MAGIC)
    overall = (out / "fig12_overall.md").read_text()
    for workload in QUICK.workloads:
        assert f"| {workload} | 8B |" in overall
    resources = (out / "fig16_resources.md").read_text()
    assert "| math | Fix-8 | 1xTP8 |" in resources
    assert "Fig. 12: overall rollout throughput" in result.output


def test_the_same_scale_gives_the_same_tables(tmp_path: Path) -> None:
    scale = replace(QUICK, num_trajectories=16, workloads=("math",))
    for name in ("a", "b"):
        run_figures(tmp_path / name, scale, only=["fig12_overall", "fig16_resources"])
    for key in ("fig12_overall", "fig16_resources"):
        assert (tmp_path / "a" / f"{key}.md").read_text() == (
            tmp_path / "b" / f"{key}.md"
        ).read_text()
    assert "fig14" not in (tmp_path / "a" / "README.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "4"], "num_gpus must be >= 8"),
        (["--only", "fig99"], "unknown experiment 'fig99'"),
        (["--engine-model", "vllm"], "unknown engine model 'vllm'"),
    ],
)
def test_bad_flags_are_user_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["sim", "figures", "--quick", "--out", str(tmp_path), *args])
    assert isinstance(result.exception, UserError)
    assert message in str(result.exception)


def test_unknown_experiment_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown experiment"):
        run_figures(tmp_path, QUICK, only=["nope"])


def test_scale_describes_itself() -> None:
    lines = FigureScale(name="x", num_trajectories=10, num_gpus=8).describe()
    assert lines[0] == (
        "scale `x`: 10 trajectories per rollout, 8 x H200 GPUs, seed 0, engine model `sglang` "
        "for every system, online predictor unless a study says"
    )


def test_a_run_the_simulator_cannot_finish_costs_one_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SimulationError marks that run failed in its table and notes; the rest still runs."""
    import heddle.bench.figures.context as context

    real_simulate = context.simulate

    def failing_fix1(trace: object, system: object, *args: object, **kwargs: object) -> object:
        if system == "fix-1":
            raise SimulationError("3 trajectories never finished under fix-1")
        return real_simulate(trace, system, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(context, "simulate", failing_fix1)
    (report,) = run_figures(tmp_path, QUICK, only=["fig16_resources"])
    markdown = (tmp_path / "fig16_resources.md").read_text()
    assert "| math | Fix-1 (failed) | - | - | - | - |" in markdown
    assert "| math | Fix-8 | 1xTP8 |" in markdown
    assert any("FAILED: math qwen3-8b fix-1: 3 trajectories" in note for note in report.notes)
