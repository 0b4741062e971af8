"""Control-plane overhead (the paper's s.7.5, Tables 1-2): time of each decider per event in a
simulated Heddle rollout, the resource plan (annealing), and the placement solver at the paper's
n = 6400 trajectories, m = 16 workers (the paper: ~42 ms for its DP).

Wall-clock times on this machine, medians where repeated; they are reported, never asserted.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from heddle.bench.figures.context import FigureRunner, sim_config
from heddle.bench.figures.report import ExperimentReport
from heddle.bench.figures.scale import FigureScale
from heddle.bench.figures.tables import TableCell, table
from heddle.control.bundle import ControlOptions, build_bundle
from heddle.control.decider import Decider, Output
from heddle.control.resources import plan_tp_degrees, representative_context
from heddle.control.systems import system_spec
from heddle.events import Event
from heddle.policy.placement.presorted import partition
from heddle.policy.resources.problem import TpInterference
from heddle.sim import SimulationError, Simulator, make_simulation_predictor, plan_workers
from heddle.workloads import generate

KEY = "overhead"
TITLE = "Control-plane overhead"
PAPER = "placement DP ~42 ms at n=6400, m=16; prediction and migration hidden behind tool time"


class TimedDecider:
    """A decider that adds up the wall time its inner decider spends per event."""

    def __init__(self, inner: Decider) -> None:
        self._inner = inner
        self.num_events = 0
        self.total_s = 0.0

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def handles(self) -> frozenset[type[Event]]:
        return self._inner.handles

    def decide(self, event: Event) -> list[Output]:
        start = time.perf_counter()
        outputs = self._inner.decide(event)
        self.total_s += time.perf_counter() - start
        self.num_events += 1
        return outputs


@dataclass(frozen=True, slots=True)
class RolloutTiming:
    deciders: list[TimedDecider]
    plan_s: float
    simulation_s: float
    makespan_s: float
    num_events: int


def num_runs(scale: FigureScale) -> int:
    return 3


def run(runner: FigureRunner) -> ExperimentReport:
    scale = runner.scale
    runner.progress.start(TITLE, num_runs(scale))
    workload = scale.ablation_workloads[0]
    try:
        timing: RolloutTiming | None = time_heddle_rollout(runner, workload)
    except SimulationError as exc:
        runner.failures.append(f"{workload} {scale.ablation_model} heddle (timed): {exc}")
        timing = None
    runner.progress.advance(f"{workload} heddle, timed deciders")
    placement_s = _median_s(_placement_call(scale), scale.num_timing_repeats)
    runner.progress.advance("placement solver")
    annealing_s = _median_s(_annealing_call(scale), max(1, scale.num_timing_repeats // 2))
    runner.progress.advance("resource plan")
    n, m = scale.placement_num_trajectories, scale.placement_num_workers
    rows: list[list[TableCell]] = [
        [f"placement solve, n={n}, m={m} (ms)", placement_s * 1e3, "~42 ms (O(n^2 m) DP)"],
        [f"resource plan (annealing), n={n}, {scale.num_gpus} GPUs (ms)", annealing_s * 1e3, "-"],
    ]
    headline = f"placement {placement_s * 1e3:.1f} ms at n={n}, m={m}"
    if timing is not None:
        rows += _rollout_rows(workload, timing)
        decider_s = sum(d.total_s for d in timing.deciders)
        per_event_us = 1e6 * decider_s / max(1, sum(d.num_events for d in timing.deciders))
        headline += (
            f"; deciders {per_event_us:.0f} us per event, {decider_s:.2f} s in all for a "
            f"{timing.makespan_s:,.0f} s rollout"
        )
    return ExperimentReport(
        key=KEY,
        title=TITLE,
        paper_claim=PAPER,
        headline=headline,
        tables=(("", table(["measure", "value", "paper"], rows)),),
        images=(),
        notes=(
            f"Decider times come from a simulated Heddle rollout of the {workload} workload "
            f"({scale.num_trajectories} trajectories, {scale.ablation_model}): the same deciders "
            "the live consumers run, timed around each decide() call on this machine.",
            "Placement lengths are total output tokens of a generated coding rollout; F is the "
            "TP1 interference of the model at the rollout's representative context.",
        ),
    )


def time_heddle_rollout(runner: FigureRunner, workload: str) -> RolloutTiming:
    """Heddle's rollout of ``workload`` with every decider timed (``heddle.sim.simulate``'s
    steps, with the deciders wrapped)."""
    trace = runner.trace(workload)
    config = runner.config(runner.scale.ablation_model)
    spec = system_spec("heddle")
    predictor = make_simulation_predictor(trace, config, runner.history(workload))
    start = time.perf_counter()
    tp_degrees = plan_workers(trace, spec, config, predictor)
    plan_s = time.perf_counter() - start
    options = ControlOptions(
        cost_for_tp=config.cost_for_tp,
        predictor=predictor,
        seed=config.seed,
        engine_model=config.engine_model,
    )
    control = build_bundle(spec, options)
    timed = [TimedDecider(decider) for decider in control.deciders]
    control.deciders = list(timed)
    start = time.perf_counter()
    result = Simulator(trace, control, tp_degrees, config).run()
    simulation_s = time.perf_counter() - start
    return RolloutTiming(timed, plan_s, simulation_s, result.makespan_s, result.num_events)


def _rollout_rows(workload: str, timing: RolloutTiming) -> list[list[TableCell]]:
    deciders: list[list[TableCell]] = [
        [
            f"decider `{d.name}`: us per event ({d.num_events} events)",
            1e6 * d.total_s / max(1, d.num_events),
            "hidden behind tool time" if d.name == "prediction" else "-",
        ]
        for d in timing.deciders
    ]
    return [
        *deciders,
        [f"{workload} rollout: resource plan (ms)", timing.plan_s * 1e3, "-"],
        [f"{workload} rollout: simulated wall time (s)", timing.simulation_s, "-"],
        [f"{workload} rollout: simulated makespan (s)", timing.makespan_s, "-"],
        [f"{workload} rollout: events", timing.num_events, "-"],
    ]


def _placement_inputs(scale: FigureScale) -> tuple[list[float], int]:
    """Total output tokens of a generated coding rollout, and its representative context."""
    trace = generate("coding", scale.placement_num_trajectories, seed=scale.seed)
    lengths = [float(t.num_output_tokens) for t in trace]
    return lengths, representative_context([t.prompt_tokens for t in trace], lengths)


def _placement_call(scale: FigureScale) -> Callable[[], object]:
    lengths, context = _placement_inputs(scale)
    config = sim_config(scale, scale.ablation_model)
    interference = TpInterference(config.cost_for_tp(1), context)
    return lambda: partition(lengths, scale.placement_num_workers, interference)


def _annealing_call(scale: FigureScale) -> Callable[[], object]:
    lengths, context = _placement_inputs(scale)
    config = sim_config(scale, scale.ablation_model)
    return lambda: plan_tp_degrees(
        "annealed",
        num_gpus=scale.num_gpus,
        lengths=lengths,
        context_tokens=context,
        cost_for_tp=config.cost_for_tp,
        rng=random.Random(scale.seed),
    )


def _median_s(call: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
