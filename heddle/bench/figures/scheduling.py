"""Fig. 14: trajectory-level scheduling (PPS with preemption) against FCFS, round-robin and
Autellix's least-attained-service, with the queueing delay of the slowest trajectory (the paper:
1.1-1.26x shorter rollouts, mostly from the longest trajectory's queueing delay).

Only the engine-side priority policy changes: every variant keeps Heddle's predictor, presorted
placement with migration and annealed TP, so the comparison isolates scheduling.
"""

from __future__ import annotations

from dataclasses import replace

from heddle.bench.figures.common import plotted, span, speedup
from heddle.bench.figures.context import FigureRunner
from heddle.bench.figures.plots import BarPanel, save_panels
from heddle.bench.figures.report import ExperimentReport
from heddle.bench.figures.scale import FigureScale
from heddle.bench.figures.tables import TableCell, table
from heddle.control.systems import SystemSpec, system_spec
from heddle.sim import SimResult

KEY = "fig14_scheduling"
TITLE = "Fig. 14: trajectory-level scheduling"
PAPER = "1.1-1.26x shorter rollout vs FCFS, RR and Autellix; the longest trajectory queues less"

VARIANTS: dict[str, SystemSpec] = {
    "heddle (PPS)": system_spec("heddle"),
    "FCFS": system_spec("heddle-no-sched"),
    "RR": system_spec("rr"),
    "Autellix (PLAS)": replace(
        system_spec("heddle"),
        name="heddle-plas",
        summary="heddle with Autellix's program-level least attained service",
        priority="plas",
    ),
}
_PARTS = ("queue_s", "generation_s", "tool_s", "migration_s")


def num_runs(scale: FigureScale) -> int:
    return len(scale.ablation_workloads) * len(VARIANTS)


def run(runner: FigureRunner) -> ExperimentReport:
    scale = runner.scale
    runner.progress.start(TITLE, num_runs(scale))
    model = scale.ablation_model
    results = {
        workload: {
            label: runner.simulate(workload, model, spec) for label, spec in VARIANTS.items()
        }
        for workload in scale.ablation_workloads
    }
    rows = [
        _row(workload, label, result, by_label["heddle (PPS)"])
        for workload, by_label in results.items()
        for label, result in by_label.items()
    ]
    gains = [
        speedup(by_label["heddle (PPS)"], result)
        for by_label in results.values()
        for label, result in by_label.items()
        if label != "heddle (PPS)"
    ]
    panels = [_breakdown_panel(workload, by_label) for workload, by_label in results.items()]
    image = save_panels(runner.image_path(KEY), f"{TITLE} ({model})", panels)
    headers = ["workload", "scheduler", "makespan s", "heddle speedup", "preemptions"]
    headers += ["slowest: queue s", "generation s", "tool s", "migration s"]
    return ExperimentReport(
        key=KEY,
        title=TITLE,
        paper_claim=PAPER,
        headline=f"{span(gains)} shorter rollout than FCFS/RR/PLAS ({model})",
        tables=(("", table(headers, rows)),),
        images=(image,),
        notes=(
            "The slowest trajectory's time splits into queueing (waiting for a batch slot, "
            "including after preemption), generation (prefill + decode), tool and migration.",
            "All variants share Heddle's placement, migration and annealed TP plan.",
        ),
    )


def _row(
    workload: str, label: str, result: SimResult | None, heddle: SimResult | None
) -> list[TableCell]:
    if result is None:
        return [workload, f"{label} (failed)", *[None] * (3 + len(_PARTS))]
    slowest = result.slowest
    return [
        workload,
        label,
        result.makespan_s,
        speedup(heddle, result),
        result.num_preemptions,
        *[getattr(slowest, part) for part in _PARTS],
    ]


def _breakdown_panel(workload: str, by_label: dict[str, SimResult | None]) -> BarPanel:
    return BarPanel(
        title=f"{workload}: slowest trajectory",
        categories=list(by_label),
        series={
            part.removesuffix("_s"): plotted(
                None if r is None else getattr(r.slowest, part) for r in by_label.values()
            )
            for part in _PARTS
        },
        ylabel="seconds",
        stacked=True,
    )
