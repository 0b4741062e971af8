"""Fig. 12: end-to-end rollout throughput of Heddle, verl and slime over the three workloads and
Qwen3-8B/14B/32B (the paper: up to 2.5x; 1.4-2.3x vs verl, 1.2-2.5x vs slime)."""

from __future__ import annotations

from heddle.sim import SimResult
from heddle.sim.figures.common import field_of, short_model, span, speedup, throughput_panel
from heddle.sim.figures.context import FigureRunner
from heddle.sim.figures.plots import save_panels
from heddle.sim.figures.report import ExperimentReport
from heddle.sim.figures.scale import FigureScale
from heddle.sim.figures.tables import Cell, table

KEY = "fig12_overall"
TITLE = "Fig. 12: overall rollout throughput"
PAPER = "up to 2.5x; 1.4-2.3x vs verl, 1.2-2.5x vs slime; gain grows with model size"
# slime ships two routers: the SGLang gateway's consistent hashing and its own least-in-flight
# SlimeRouter (heddle.control.systems); the paper does not say which, so we run both and compare
# Heddle with the better one.
SLIME_SYSTEMS = ("slime", "slime-least-inflight")
SYSTEMS = ("heddle", "verl", *SLIME_SYSTEMS)


def num_runs(scale: FigureScale) -> int:
    return len(scale.workloads) * len(scale.models) * len(SYSTEMS)


def run(runner: FigureRunner) -> ExperimentReport:
    scale = runner.scale
    runner.progress.start(TITLE, num_runs(scale))
    results = {
        (workload, model): {s: runner.simulate(workload, model, s) for s in SYSTEMS}
        for workload in scale.workloads
        for model in scale.models
    }
    rows = [_row(workload, model, by_system) for (workload, model), by_system in results.items()]
    vs_verl = [speedup(r["heddle"], r["verl"]) for r in results.values()]
    vs_slime = [speedup(r["heddle"], _best_slime(r)) for r in results.values()]
    headline = f"{span(vs_verl)} vs verl, {span(vs_slime)} vs slime (its better router)"
    panels = [
        throughput_panel(
            workload,
            [short_model(m) for m in scale.models],
            {s: [results[(workload, m)][s] for m in scale.models] for s in SYSTEMS},
        )
        for workload in scale.workloads
    ]
    image = save_panels(runner.image_path(KEY), TITLE, panels)
    headers = ["workload", "model", *[f"{s} tok/s" for s in SYSTEMS]]
    headers += ["heddle/verl", "heddle/slime", "heddle makespan/LB", "verl makespan/LB"]
    return ExperimentReport(
        key=KEY,
        title=TITLE,
        paper_claim=PAPER,
        headline=headline,
        tables=(("", table(headers, rows)),),
        images=(image,),
        notes=(
            "heddle/slime divides by the better of slime's two routers (consistent hashing, "
            "least in-flight).",
            "LB: heddle.policy.lower_bound (max of the longest solo trajectory and total work "
            "over peak capacity); makespan/LB near 1 leaves no room for any policy.",
        ),
    )


def _best_slime(by_system: dict[str, SimResult | None]) -> SimResult | None:
    runs = [r for r in (by_system[s] for s in SLIME_SYSTEMS) if r is not None]
    return max(runs, key=lambda r: r.throughput_tok_s) if runs else None


def _row(workload: str, model: str, by_system: dict[str, SimResult | None]) -> list[Cell]:
    heddle = by_system["heddle"]
    return [
        workload,
        short_model(model),
        *[field_of(by_system[s], "throughput_tok_s") for s in SYSTEMS],
        speedup(heddle, by_system["verl"]),
        speedup(heddle, _best_slime(by_system)),
        field_of(heddle, "makespan_over_lb"),
        field_of(by_system["verl"], "makespan_over_lb"),
    ]
