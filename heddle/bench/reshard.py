"""``heddle bench reshard``: what tail re-sharding earns, cell by cell, and how it moves with the
engine restart it pays (``heddle.control.reshard``).

Each cell (a sweep cell: ``heddle.experiments.sweep``, or one named by its parameters) runs
``heddle-no-reshard`` on the plan it chooses, then ``heddle`` on that same plan at each engine
restart cost (``SimConfig.engine_restart_s``), dearest last: the same plan isolates the tail
mechanism from the plan check (which can pick another plan when the mechanism is on). A cell
where a restart cost triggers no re-shard skips the dearer ones: a dearer switch pays less, so
it would not be taken either (the makespan is then ``heddle-no-reshard``'s). ``warm`` cells learn
from their history (the previous epoch, as the sweep's); cold ones start from nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from heddle.experiments.cells import Cell
from heddle.experiments.sweep import SweepConfig, cell_sim_config, cell_traces, sweep_cells
from heddle.experiments.sweep_pool import run_in_pool
from heddle.sim.run import simulate


@dataclass(frozen=True, slots=True)
class ReshardBenchConfig:
    sweep: SweepConfig = field(default_factory=SweepConfig)
    """The cells (and everything a sweep fixes: engine model, predictor, sizes)."""
    restarts_s: tuple[float, ...] = (10.0, 30.0, 90.0)
    """Engine restart costs to run ``heddle`` at, cheapest first."""
    is_cold: bool = False
    """Start every system without a history."""
    tp_degrees: tuple[int, ...] = ()
    """A fixed plan for both systems (empty: ``heddle-no-reshard``'s choice)."""

    def __post_init__(self) -> None:
        if not self.restarts_s or any(not r >= 0 for r in self.restarts_s):
            raise ValueError("give at least one restart cost, each >= 0")


@dataclass(frozen=True, slots=True)
class RestartRun:
    engine_restart_s: float
    makespan_s: float
    num_reshards: int


@dataclass(frozen=True, slots=True)
class ReshardCell:
    cell: Cell
    kv_ratio: float
    """The KV pressure it ran at."""
    tp_degrees: list[int]
    lower_bound_s: float
    no_reshard_s: float
    """``heddle-no-reshard``'s makespan."""
    runs: list[RestartRun]
    """``heddle`` at each restart cost run (the dearer ones skipped once one triggers none)."""
    wall_s: float

    def makespan_at(self, engine_restart_s: float) -> tuple[float, int]:
        """``heddle``'s makespan and re-shards at a restart cost (a skipped one: no re-shard,
        ``heddle-no-reshard``'s makespan)."""
        for run in self.runs:
            if run.engine_restart_s == engine_restart_s:
                return run.makespan_s, run.num_reshards
        return self.no_reshard_s, 0


def run_reshard_cell(cell: Cell, config: ReshardBenchConfig) -> ReshardCell:
    """One cell (see the module docstring)."""
    started = time.perf_counter()
    trace, history = cell_traces(cell, config.sweep, 0)
    sim, kv = cell_sim_config(cell, config.sweep, trace, history)
    learned_from = () if config.is_cold else history
    plan = list(config.tp_degrees) or None
    base = simulate(trace, "heddle-no-reshard", sim, history=learned_from, tp_degrees=plan)
    runs: list[RestartRun] = []
    for restart_s in sorted(config.restarts_s):
        at = replace(sim, engine_restart_s=restart_s)
        result = simulate(trace, "heddle", at, history=learned_from, tp_degrees=base.tp_degrees)
        runs.append(RestartRun(restart_s, result.makespan_s, result.num_reshards))
        if not result.num_reshards:
            break
    return ReshardCell(
        cell=cell,
        kv_ratio=kv.ratio,
        tp_degrees=base.tp_degrees,
        lower_bound_s=base.lower_bound_s,
        no_reshard_s=base.makespan_s,
        runs=runs,
        wall_s=time.perf_counter() - started,
    )


def bench_reshard(
    config: ReshardBenchConfig,
    cells: Sequence[Cell] | None = None,
    jobs: int = 1,
    on_done: Callable[[ReshardCell], None] | None = None,
) -> list[ReshardCell]:
    """Every cell of ``config.sweep`` (or ``cells``), ``jobs`` at a time; in cell order."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    results: list[ReshardCell] = []
    for result in run_in_pool(run_reshard_cell, cells or sweep_cells(config.sweep), config, jobs):
        results.append(result)
        if on_done is not None:
            on_done(result)
    return sorted(results, key=lambda r: r.cell.index)


def one_cell(family: str, draw_seed: int, model: str, num_gpus: int, kv_ratio: float) -> list[Cell]:
    """A cell named by its parameters (``Cell`` index 0)."""
    return [Cell(0, family, draw_seed, model, num_gpus, kv_ratio)]


def summary(cells: Sequence[ReshardCell], restarts_s: Sequence[float]) -> dict[str, object]:
    """Per restart cost: the cells where re-sharding triggered, and the geometric mean of
    heddle over heddle-no-reshard (below 1: faster) over all cells and over those."""
    by_restart: dict[str, object] = {}
    for restart_s in restarts_s:
        ratios = [c.makespan_at(restart_s)[0] / c.no_reshard_s for c in cells]
        triggered = [c for c in cells if c.makespan_at(restart_s)[1]]
        hit = [c.makespan_at(restart_s)[0] / c.no_reshard_s for c in triggered]
        by_restart[f"{restart_s:g}"] = {
            "cells_triggered": [c.cell.index for c in triggered],
            "geomean_ratio": _geomean(ratios),
            "geomean_ratio_triggered": _geomean(hit),
            "worst_ratio": max(ratios, default=1.0),
        }
    return by_restart


def _geomean(values: Sequence[float]) -> float:
    if not values:
        return 1.0
    product = 1.0
    for value in values:
        product *= value
    return float(product ** (1.0 / len(values)))
