"""Fig. 15: trajectory-aware placement (presorted partition + migration) against a least-load
router re-balancing every step and verl's cache-affinity router (the paper: 1.2-1.5x).

Scheduling and resources stay Heddle's in every variant (``heddle.control.systems``).
"""

from __future__ import annotations

from heddle.bench.figures.ablation import num_ablation_runs, run_ablation
from heddle.bench.figures.common import span, speedup, throughput_panel
from heddle.bench.figures.context import FigureRunner
from heddle.bench.figures.plots import save_panels
from heddle.bench.figures.report import ExperimentReport
from heddle.bench.figures.scale import FigureScale
from heddle.bench.figures.tables import TableCell, table
from heddle.sim import SimResult

KEY = "fig15_placement"
TITLE = "Fig. 15: trajectory-aware placement"
PAPER = "1.2-1.5x throughput vs least-load and cache-affinity placement"

VARIANTS = {
    "heddle (presorted + migration)": "heddle",
    "least-load": "heddle-least-load",
    "cache-affinity": "heddle-no-place",
}


def num_runs(scale: FigureScale) -> int:
    return num_ablation_runs(scale, VARIANTS)


def run(runner: FigureRunner) -> ExperimentReport:
    runs = run_ablation(runner, TITLE, VARIANTS)
    model, rows, gains = runs.model, runs.rows(_row), runs.gains()
    panel = throughput_panel(model, runs.workloads, runs.by_variant())
    image = save_panels(runner.image_path(KEY), TITLE, [panel])
    headers = ["workload", "placement", "tok/s", "heddle speedup", "makespan/LB"]
    headers += ["migrations", "recomputed tokens", "slowest generation s"]
    return ExperimentReport(
        key=KEY,
        title=TITLE,
        paper_claim=PAPER,
        headline=f"{span(gains)} vs least-load and cache-affinity ({model})",
        tables=(("", table(headers, rows)),),
        images=(image,),
        notes=(
            "Recomputed tokens: prefill repeated because a turn landed where its KV cache was "
            "not (least-load moves trajectories every step) or was evicted.",
        ),
    )


def _row(
    workload: str, label: str, result: SimResult | None, heddle: SimResult | None
) -> list[TableCell]:
    if result is None:
        return [workload, f"{label} (failed)", *[None] * 6]
    return [
        workload,
        label,
        result.throughput_tok_s,
        speedup(heddle, result),
        result.makespan_over_lb,
        result.num_migrations,
        result.num_recomputed_tokens,
        result.slowest.generation_s,
    ]
