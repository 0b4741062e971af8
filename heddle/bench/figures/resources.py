"""Fig. 16: the trajectory-adaptive resource manager (annealed heterogeneous TP) against
homogeneous Fix-1 (all TP1) and Fix-8 (all TP8), with active trajectories over time (the paper:
1.1-1.3x; Fix-1 starts fast and drags on its tail, Fix-8 is slow throughout).
"""

from __future__ import annotations

from heddle.bench.figures.ablation import num_ablation_runs, run_ablation
from heddle.bench.figures.common import span, speedup, throughput_panel
from heddle.bench.figures.context import FigureRunner
from heddle.bench.figures.plots import LinePanel, save_panels
from heddle.bench.figures.report import ExperimentReport
from heddle.bench.figures.scale import FigureScale
from heddle.bench.figures.tables import TableCell, table
from heddle.sim import SimResult

KEY = "fig16_resources"
TITLE = "Fig. 16: trajectory-adaptive resource manager"
PAPER = "1.1-1.3x vs Fix-1 and Fix-8; Heddle finishes all trajectories first"

VARIANTS = {"heddle (annealed TP)": "heddle", "Fix-1": "fix-1", "Fix-8": "fix-8"}


def num_runs(scale: FigureScale) -> int:
    return num_ablation_runs(scale, VARIANTS)


def run(runner: FigureRunner) -> ExperimentReport:
    runs = run_ablation(runner, TITLE, VARIANTS)
    model, results, rows, gains = runs.model, runs.results, runs.rows(_row), runs.gains()
    bars = throughput_panel(f"(a) {model}", runs.workloads, runs.by_variant())
    lines = [_active_panel(workload, by_label) for workload, by_label in results.items()]
    image = save_panels(runner.image_path(KEY), TITLE, [bars, *lines])
    headers = ["workload", "resources", "TP degrees", "tok/s", "heddle speedup", "makespan/LB"]
    return ExperimentReport(
        key=KEY,
        title=TITLE,
        paper_claim=PAPER,
        headline=f"{span(gains)} vs Fix-1 and Fix-8 ({model})",
        tables=(("", table(headers, rows)),),
        images=(image,),
        notes=("All variants run Heddle's scheduling and placement; only the TP plan differs.",),
    )


def _row(
    workload: str, label: str, result: SimResult | None, heddle: SimResult | None
) -> list[TableCell]:
    if result is None:
        return [workload, f"{label} (failed)", *[None] * 4]
    return [
        workload,
        label,
        _degrees(result.tp_degrees),
        result.throughput_tok_s,
        speedup(heddle, result),
        result.makespan_over_lb,
    ]


def _degrees(tp_degrees: list[int]) -> str:
    """``[4, 2, 2, 1]`` -> ``1xTP4 + 2xTP2 + 1xTP1``."""
    counts = {tp: tp_degrees.count(tp) for tp in sorted(set(tp_degrees), reverse=True)}
    return " + ".join(f"{n}xTP{tp}" for tp, n in counts.items())


def _active_panel(workload: str, by_label: dict[str, SimResult | None]) -> LinePanel:
    return LinePanel(
        title=f"(b) {workload}: active trajectories",
        series={
            label: ([t for t, _ in r.active_over_time], [n for _, n in r.active_over_time])
            for label, r in by_label.items()
            if r is not None
        },
        xlabel="time (s)",
        ylabel="trajectories not finished",
        steps=True,
    )
