"""The zoo sweep: every system on many workloads it was never tuned on (``heddle sim sweep``).

A cell is one zoo family x one parameter draw (by seed) x one model x one GPU count x one KV
pressure, judged with one history. Its rollout is the family's trace of that draw; its history
(``heddle.workloads.history``), the previous training step that the online predictor learns
from and the plan check simulates: other prompts of the same family (``other``, the realistic
one and the default) or the same prompts an epoch back (``same``); ``histories`` runs each cell
under each kind given (the report then has a summary per kind). Every system of the sweep runs
the same cell on the same engine model and predictor (``SweepConfig``).

Splits: ``tuning`` are the grid's cells of draw seeds ``seed * 100000 + k`` (the cells every
earlier sweep ran; decisions were made on them, including on the quarter once called held out);
``heldout`` are fresh cells whose draw seeds come from a namespace no run had used before
(``HELDOUT_SEED_BASE``: never tune on them; when a decision has looked at them, bump
``HELDOUT_GENERATION`` and say so); ``corpus`` are the regression cases the hunter found
(``heddle.experiments.corpus``), each with its own history. The summary reports each split.

Size: a cell runs as many trajectories as it takes for ``steps_per_cell`` steps (whole GRPO
groups, within ``[min, max]_trajectories``), since a simulation's cost grows with its steps; the
KV pressure comes from scaling the cluster's KV (``heddle.experiments.kv_pressure``), not from more
trajectories. A cell's ratio can end above its target (the unscaled cluster is already past it:
web's page dumps) or below it (the floor that keeps the longest trajectory on a TP1 worker),
so each cell reports the ratio it ran at. Its cost is in docs/benchmarks.md.

Replications (``replications``): each cell also runs on other epochs of its workload (new
samples of the same prompts, each with its own history), and a system's makespan is its mean
over them. A cell's outcome in a tail-bound family turns on which trajectories draw the long
steps, so one sample judges a policy with noise of a few percent, and the best of five
baselines on one sample beats an equal system on most draws; replication 0 is the single
sample.

With ``text_signal`` both traces carry text (``with_family_text``); the context model comes
from ``run_cell(context=...)``, built above this layer (``heddle.experiments.sweep_context``).

With ``reference`` each cell also runs the best-known reference (``heddle.experiments.reference``:
heddle with the oracle predictor on every TP plan), apart from the systems: it is never a baseline.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from heddle.control.systems import SYSTEMS
from heddle.experiments.cells import (
    HELDOUT_SEED_BASE,
    SPLITS,
    Cell,
    CellSplit,
    Split,
)
from heddle.experiments.corpus import CORPUS_DIR, corpus_cells
from heddle.experiments.kv_pressure import KvPressure, kv_pressure, scaled_config
from heddle.experiments.reference import Reference, best_known
from heddle.experiments.sweep_pool import run_in_pool
from heddle.policy.prediction import ContextAnswer
from heddle.sim.config import SimConfig
from heddle.sim.results import SimResult
from heddle.sim.run import simulate
from heddle.traces import TraceTrajectory
from heddle.workloads.history import DEFAULT_HISTORY, HISTORY_KINDS, HistoryKind, make_history
from heddle.workloads.zoo import BROAD_FAMILIES, with_family_text, zoo_family

_DRAW_SEEDS_PER_BASE_SEED = 100_000
_SIM_DEFAULTS = SimConfig()
_MAX_CELLS = 10_000  # either split then fits in one base seed's draw seeds
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """What a sweep runs; every field is reported with its results."""

    families: tuple[str, ...] = BROAD_FAMILIES
    models: tuple[str, ...] = ("qwen3-8b", "qwen3-32b")
    gpu_counts: tuple[int, ...] = (8, 16, 64)
    kv_ratios: tuple[float, ...] = (0.5, 2.0)
    """Target footprint / capacity ratios (``heddle.experiments.kv_pressure``)."""
    num_cells: int = 40
    """Tuning cells (the grid every earlier sweep ran)."""
    num_heldout_cells: int = 10
    """Fresh held-out cells (``HELDOUT_SEED_BASE``)."""
    histories: tuple[HistoryKind, ...] = (DEFAULT_HISTORY,)
    """The histories each zoo cell is judged with (``heddle.workloads.history``); a corpus
    cell keeps its own."""
    with_corpus: bool = True
    """Whether the corpus' cells (``heddle.experiments.corpus``) run beside the zoo's."""
    corpus_dir: str = ""
    """The corpus' folder (empty: the one in the package)."""
    seed: int = 0
    """Base seed: shuffles the grid and numbers the parameter draws."""
    split: Split = "all"
    systems: tuple[str, ...] = tuple(SYSTEMS)
    engine_model: str = _SIM_DEFAULTS.engine_model
    predictor: str = "online"
    predictor_model: str = ""
    """``context``: a model folder (empty: one trained per cell on its history)."""
    predictor_latency_ms: float = 0.0
    text_signal: float | None = None
    """The text layer's signal strength (None: traces without text)."""
    hardware: str = "h200"
    steps_per_cell: int = 4000
    min_trajectories: int = 64
    max_trajectories: int = 1024
    replications: int = 1
    """Epochs of each cell's workload every system runs (makespans averaged over them)."""
    reference: bool = False
    """Also run the best-known reference on each replication (``heddle.experiments.reference``)."""

    def __post_init__(self) -> None:
        for name in ("num_cells", "num_heldout_cells"):
            if not 0 <= getattr(self, name) <= _MAX_CELLS:
                raise ValueError(f"{name} must be in [0, {_MAX_CELLS}], got {getattr(self, name)}")
        if any(kind not in HISTORY_KINDS for kind in self.histories):
            raise ValueError(f"unknown history in {self.histories}; choose from {HISTORY_KINDS}")
        if self.seed < 0:
            raise ValueError(f"the base seed must be >= 0, got {self.seed}")
        if not 1 <= self.min_trajectories <= self.max_trajectories:
            raise ValueError("need 1 <= min_trajectories <= max_trajectories")
        if self.steps_per_cell < 1:
            raise ValueError(f"steps_per_cell must be >= 1, got {self.steps_per_cell}")
        if self.replications < 1:
            raise ValueError(f"replications must be >= 1, got {self.replications}")
        if self.split not in SPLITS:
            raise ValueError(f"unknown split {self.split!r}; choose one of {SPLITS}")
        for name in ("families", "models", "gpu_counts", "kv_ratios", "systems", "histories"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        for family in self.families:
            zoo_family(family)


def sweep_cells(config: SweepConfig) -> list[Cell]:
    """The cells of the split, each once per history of ``histories`` (corpus cells once, with
    their own): ``num_cells`` tuning cells, then ``num_heldout_cells`` held-out ones, then the
    corpus' (numbered on). Tuning and held-out cells walk the grid (families x models x GPU
    counts x KV ratios) in rounds of one cell per family (each family's settings shuffled by
    the base seed), so any number of cells spreads evenly over the families; tuning cell ``k``
    draws its parameters from seed ``seed * 100000 + k``, held-out cell ``k`` from
    ``HELDOUT_SEED_BASE + seed * 100000 + k``."""
    workloads: list[Cell] = []
    if config.split in ("tuning", "all"):
        base = config.seed * _DRAW_SEEDS_PER_BASE_SEED
        workloads += _grid_cells(config, "tuning", config.num_cells, base, config.seed)
    if config.split in ("heldout", "all"):
        base = HELDOUT_SEED_BASE + config.seed * _DRAW_SEEDS_PER_BASE_SEED
        workloads += _grid_cells(config, "heldout", config.num_heldout_cells, base, base)
    cells = [
        replace(cell, index=index, history=history)
        for index, cell in enumerate(workloads)
        for history in config.histories
    ]
    if config.with_corpus and config.split in ("corpus", "all"):
        cells += _corpus_cells(config, len(workloads))
    return cells


def _grid_cells(
    config: SweepConfig, split: CellSplit, num_cells: int, base_seed: int, order_seed: int
) -> list[Cell]:
    rng = random.Random(order_seed)
    settings = list(itertools.product(config.models, config.gpu_counts, config.kv_ratios))
    orders = {family: rng.sample(settings, len(settings)) for family in config.families}
    grid = [
        (family, *orders[family][index])
        for index in range(len(settings))
        for family in config.families
    ]
    return [
        Cell(k, family, base_seed + k, model, gpus, ratio, split)
        for k in range(num_cells)
        for family, model, gpus, ratio in (grid[k % len(grid)],)
    ]


def _corpus_cells(config: SweepConfig, first_index: int) -> list[Cell]:
    return corpus_cells(Path(config.corpus_dir) if config.corpus_dir else CORPUS_DIR, first_index)


@dataclass(frozen=True, slots=True)
class SystemRun:
    """One system on one cell; with replications, the mean over them (counts: the sum;
    ``tp_degrees``: replication 0's plan)."""

    makespan_s: float
    makespan_over_lb: float
    """The mean makespan over the mean lower bound."""
    throughput_tok_s: float
    tp_degrees: list[int]
    num_failed: int
    num_preemptions: int
    num_recomputed_tokens: int
    wall_s: float
    makespans_s: list[float] = field(default_factory=list)
    """Per replication (empty in results written before replications)."""
    concurrency_cap: int | None = None
    """A baseline's concurrency cap on replication 0, when it binds (``SimResult``)."""


@dataclass(frozen=True, slots=True)
class CellResult:
    cell: Cell
    split: Split
    num_trajectories: int
    num_steps: int
    num_groups: int
    kv: KvPressure
    lower_bound_s: float | None
    """None when no system ran; with replications, the mean of theirs."""
    runs: dict[str, SystemRun]
    errors: dict[str, str] = field(default_factory=dict)
    """Systems whose simulation raised, with the message (left out of every ratio)."""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    """CPU seconds of the cell's process: its cost on an otherwise idle core."""
    lower_bounds_s: list[float] = field(default_factory=list)
    """Per replication."""
    reference_s: float | None = None
    """The best-known reference's makespan, its mean over replications (None: not run)."""
    reference_tp_degrees: list[int] = field(default_factory=list)
    """The reference's plan on replication 0."""
    reference_wall_s: float = 0.0


def cell_traces(
    cell: Cell, config: SweepConfig, replication: int = 0
) -> tuple[list[TraceTrajectory], list[TraceTrajectory]]:
    """The cell's rollout and its history (of the cell's kind, as many trajectories), cut to
    whole groups once ``steps_per_cell`` steps are reached. Replication ``r`` samples the
    rollout from epoch ``2r`` (``heddle.workloads.history.make_history``: a ``same`` history
    is epoch ``2r + 1``). A cell with a ``source`` takes its traces from there."""
    if cell.source is not None:
        return cell.source.traces(cell, replication)
    family = zoo_family(cell.family)
    params = family.draw(random.Random(cell.draw_seed))
    full = family.generate(params, config.max_trajectories, cell.draw_seed, epoch=2 * replication)
    count = _num_trajectories(full, config)

    def sample(seed: int, epoch: int) -> list[TraceTrajectory]:
        return family.generate(params, count, seed, epoch=epoch)

    history = make_history(cell.history, sample, cell.draw_seed, replication)
    if config.text_signal is None or not history:
        return full[:count], history
    signal, seed = config.text_signal, cell.draw_seed + 2 * replication
    return with_family_text(cell.family, full[:count], signal, seed), with_family_text(
        cell.family, history, signal, seed + 1
    )


def _num_trajectories(trace: Sequence[TraceTrajectory], config: SweepConfig) -> int:
    steps = 0
    for index, trajectory in enumerate(trace):
        steps += len(trajectory.steps)
        count = index + 1
        is_group_end = count == len(trace) or trace[count].group != trajectory.group
        if count >= config.min_trajectories and steps >= config.steps_per_cell and is_group_end:
            return count
    return len(trace)


def cell_sim_config(
    cell: Cell,
    config: SweepConfig,
    trace: Sequence[TraceTrajectory],
    history: Sequence[TraceTrajectory],
) -> tuple[SimConfig, KvPressure]:
    """The simulation settings every system of the cell runs on: the cell's model and GPUs,
    the sweep's engine model and predictor, and the KV scaled to the cell's target ratio."""
    kv = kv_pressure([trace, history], cell.model, config.hardware, cell.num_gpus, cell.kv_ratio)
    base = SimConfig(
        model=cell.model,
        hardware=config.hardware,
        num_gpus=cell.num_gpus,
        engine_model=config.engine_model,
        seed=cell.draw_seed,
        predictor=config.predictor,
        predictor_latency_ms=config.predictor_latency_ms,
    )
    return scaled_config(base, kv.kv_scale), kv


ContextFor = Callable[[Sequence[TraceTrajectory], Sequence[TraceTrajectory]], ContextAnswer]
"""(history, rollout) -> the context model every system of the cell asks."""


def run_cell(cell: Cell, config: SweepConfig, context: ContextFor | None = None) -> CellResult:
    """Every system of ``config`` on ``cell``, on each replication; a system that raises on
    any replication is recorded, not fatal. The cell's sizes and KV pressure are replication
    0's."""
    start, start_cpu = time.perf_counter(), time.process_time()
    samples: dict[str, list[tuple[SimResult, float]]] = {name: [] for name in config.systems}
    errors: dict[str, str] = {}
    lower_bounds: list[float] = []
    references: list[Reference] = []
    first: tuple[list[TraceTrajectory], KvPressure] | None = None
    for replication in range(config.replications):
        trace, history = cell_traces(cell, config, replication)
        answer = context(history, trace) if context is not None else None
        sim_config, kv = cell_sim_config(cell, config, trace, history)
        first = first or (trace, kv)
        if config.reference:
            references.append(best_known(trace, history, sim_config))
        bound: float | None = None
        for name in config.systems:
            if name in errors:
                continue
            began = time.perf_counter()
            try:
                result = simulate(trace, name, sim_config, history=history, context=answer)
            except (ValueError, RuntimeError) as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
                continue
            samples[name].append((result, time.perf_counter() - began))
            bound = result.lower_bound_s
        if bound is not None:
            lower_bounds.append(bound)
    assert first is not None
    trace, kv = first
    lower_bound = statistics.fmean(lower_bounds) if lower_bounds else None
    runs = {
        name: mean_run(system_samples, lower_bound or 0.0)
        for name, system_samples in samples.items()
        if name not in errors and system_samples
    }
    return CellResult(
        cell=cell,
        split=cell.split,
        num_trajectories=len(trace),
        num_steps=sum(len(t.steps) for t in trace),
        num_groups=len({t.group for t in trace}),
        kv=kv,
        lower_bound_s=lower_bound,
        runs=runs,
        errors=errors,
        wall_s=time.perf_counter() - start,
        cpu_s=time.process_time() - start_cpu,
        lower_bounds_s=lower_bounds,
        reference_s=statistics.fmean(r.makespan_s for r in references) if references else None,
        reference_tp_degrees=references[0].tp_degrees if references else [],
        reference_wall_s=sum(r.wall_s for r in references),
    )


def mean_run(samples: Sequence[tuple[SimResult, float]], lower_bound: float) -> SystemRun:
    """One system's run of a cell from its ``(result, wall seconds)`` per replication."""
    makespans = [result.makespan_s for result, _ in samples]
    makespan = statistics.fmean(makespans)
    return SystemRun(
        makespan_s=makespan,
        makespan_over_lb=makespan / lower_bound if lower_bound > 0 else math.nan,
        throughput_tok_s=statistics.fmean(result.throughput_tok_s for result, _ in samples),
        tp_degrees=samples[0][0].tp_degrees,
        num_failed=sum(result.num_failed for result, _ in samples),
        num_preemptions=sum(result.num_preemptions for result, _ in samples),
        num_recomputed_tokens=sum(result.num_recomputed_tokens for result, _ in samples),
        wall_s=sum(wall for _, wall in samples),
        makespans_s=makespans,
        concurrency_cap=samples[0][0].concurrency_cap,
    )


def run_sweep(
    config: SweepConfig,
    jobs: int = 2,
    on_done: Callable[[CellResult], None] | None = None,
    run: Callable[[Cell, SweepConfig], CellResult] = run_cell,
) -> list[CellResult]:
    """Every cell of ``config`` (``run`` of it), ``jobs`` at a time in worker processes (1: in
    this process); ``on_done`` hears of each cell as it finishes. Results in cell order."""
    results = map_cells(run, config, jobs, on_done)
    return sorted(results, key=lambda r: r.cell.index)


def map_cells(
    run: Callable[[Cell, SweepConfig], _R],
    config: SweepConfig,
    jobs: int,
    on_done: Callable[[_R], None] | None = None,
) -> list[_R]:
    """``run(cell, config)`` for every cell of ``config``, ``jobs`` at a time in worker
    processes (``run`` must then be a module-level function; 1: in this process), in the
    order they finish; ``on_done`` hears of each."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    results: list[_R] = []
    for result in run_in_pool(run, sweep_cells(config), config, jobs):
        results.append(result)
        if on_done is not None:
            on_done(result)
    return results
