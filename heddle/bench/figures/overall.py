"""Fig. 12: end-to-end rollout throughput of Heddle, verl and slime over the three workloads and
Qwen3-8B/14B/32B (the paper: up to 2.5x; 1.4-2.3x vs verl, 1.2-2.5x vs slime)."""

from __future__ import annotations

from heddle.bench.figures.common import field_of, short_model, span, speedup, throughput_panel
from heddle.bench.figures.context import FigureRunner
from heddle.bench.figures.plots import save_panels
from heddle.bench.figures.report import ExperimentReport
from heddle.bench.figures.scale import FigureScale
from heddle.bench.figures.tables import TableCell, table
from heddle.control.systems import SYSTEMS
from heddle.sim import SimResult

KEY = "fig12_overall"
TITLE = "Fig. 12: overall rollout throughput"
PAPER = "up to 2.5x; 1.4-2.3x vs verl, 1.2-2.5x vs slime; gain grows with model size"
# Every registered baseline runs at its best (slime with each of its routers, Autellix), and
# Heddle is compared with each and with the best of them in each cell.
BASELINES = tuple(name for name, spec in SYSTEMS.items() if spec.kind == "baseline")
SLIME_SYSTEMS = tuple(name for name in BASELINES if name.startswith("slime"))
HEDDLE_AND_BASELINES = ("heddle", *BASELINES)


def num_runs(scale: FigureScale) -> int:
    return len(scale.workloads) * len(scale.models) * len(HEDDLE_AND_BASELINES)


def run(runner: FigureRunner) -> ExperimentReport:
    scale = runner.scale
    runner.progress.start(TITLE, num_runs(scale))
    results = {
        (workload, model): {s: runner.simulate(workload, model, s) for s in HEDDLE_AND_BASELINES}
        for workload in scale.workloads
        for model in scale.models
    }
    rows = [_row(workload, model, by_system) for (workload, model), by_system in results.items()]
    vs_verl = [speedup(r["heddle"], r["verl"]) for r in results.values()]
    vs_slime = [speedup(r["heddle"], _best_of(r, SLIME_SYSTEMS)) for r in results.values()]
    vs_best = [speedup(r["heddle"], _best_of(r, BASELINES)) for r in results.values()]
    headline = (
        f"{span(vs_verl)} vs verl, {span(vs_slime)} vs slime (its best router), "
        f"{span(vs_best)} vs the best baseline"
    )
    panels = [
        throughput_panel(
            workload,
            [short_model(m) for m in scale.models],
            {s: [results[(workload, m)][s] for m in scale.models] for s in HEDDLE_AND_BASELINES},
        )
        for workload in scale.workloads
    ]
    image = save_panels(runner.image_path(KEY), TITLE, panels)
    headers = ["workload", "model", *[f"{s} tok/s" for s in HEDDLE_AND_BASELINES]]
    headers += ["heddle/verl", "heddle/slime", "heddle/best", "heddle makespan/LB"]
    headers += ["best makespan/LB"]
    return ExperimentReport(
        key=KEY,
        title=TITLE,
        paper_claim=PAPER,
        headline=headline,
        tables=(("", table(headers, rows)),),
        images=(image,),
        notes=(
            "Ratios are throughputs (above 1, heddle is faster). heddle/slime divides by the best "
            "of slime's routers (cache-aware, consistent hashing, least in-flight); heddle/best "
            "by the best of every baseline in that cell.",
            f"Engine model `{scale.engine_model}` for every system; predictor `online`.",
            "LB: heddle.policy.lower_bound (max of the longest solo trajectory and total work "
            "over peak capacity); makespan/LB near 1 leaves no room for any policy.",
        ),
    )


def _best_of(by_system: dict[str, SimResult | None], names: tuple[str, ...]) -> SimResult | None:
    runs = [r for r in (by_system[s] for s in names) if r is not None]
    return max(runs, key=lambda r: r.throughput_tok_s) if runs else None


def _row(workload: str, model: str, by_system: dict[str, SimResult | None]) -> list[TableCell]:
    heddle = by_system["heddle"]
    best = _best_of(by_system, BASELINES)
    return [
        workload,
        short_model(model),
        *[field_of(by_system[s], "throughput_tok_s") for s in HEDDLE_AND_BASELINES],
        speedup(heddle, by_system["verl"]),
        speedup(heddle, _best_of(by_system, SLIME_SYSTEMS)),
        speedup(heddle, best),
        field_of(heddle, "makespan_over_lb"),
        field_of(best, "makespan_over_lb"),
    ]
