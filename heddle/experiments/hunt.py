"""The workload hunter (``heddle sim hunt``): a search of the hunter's space
(``heddle.experiments.hunt_space``) for the cells where Heddle loses most, to the best baseline or
to one of its own ablations (``heddle-*``).

Method, in three phases over ``budget`` searched cells and a confirmation:

1. random: ``budget * random_share`` points drawn over the whole space (point ``k`` from its
   own seed, so any cell is reproducible from its parameters and seed alone);
2. local: the rest, in rounds of ``round_size``: each round mutates the current worst cells
   (``num_parents``: half the worst by heddle / best baseline, half by heddle / best
   ablation), one to three dimensions at a time (``hunt_space.mutate_point``);
3. confirm: the ``num_confirm`` worst cells (half by each ratio) run again on
   ``confirm_replications`` epochs (makespans averaged, as the sweep's ``--replications``):
   a search that keeps the maximum of noisy samples finds lucky samples too, so the reported
   worst are the confirmed figures.

Every cell runs every system of ``systems`` through the sweep's ``run_cell`` (the same engine
model, predictor, KV scaling and history handling), so a hunt cell and a sweep cell are judged
alike. The search is deterministic for a seed whatever the number of jobs: a round's parents
depend only on the results of the rounds before it.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from heddle.control.systems import SYSTEMS
from heddle.experiments.hunt_space import (
    MAX_HUNT_SEED,
    SEEDS_PER_HUNT,
    HuntPoint,
    draw_point,
    hunt_seed,
    mutate_point,
)
from heddle.experiments.sweep import CellResult, SweepConfig, run_cell
from heddle.experiments.sweep_pool import run_in_pool
from heddle.experiments.sweep_summary import HEDDLE, CellRatios, cell_ratios

HuntPhase = Literal["random", "local"]
_REDRAWS = 20
SAME_FINDING = 0.005
_SWEEP_DEFAULTS = SweepConfig()


def hunt_systems() -> tuple[str, ...]:
    """Heddle, every baseline and every ``heddle-*`` ablation of the registry."""
    return tuple(
        name
        for name, spec in SYSTEMS.items()
        if spec.kind in ("heddle", "baseline")
        or (spec.kind == "ablation" and name.startswith(f"{HEDDLE}-"))
    )


@dataclass(frozen=True, slots=True)
class HuntConfig:
    """What a hunt runs; every field is reported with its results."""

    budget: int = 48
    """Cells searched (random and local; the confirmation runs on top)."""
    seed: int = 0
    random_share: float = 0.5
    round_size: int = 8
    num_parents: int = 4
    num_confirm: int = 4
    confirm_replications: int = 3
    max_steps: int = 2000
    """Steps a cell runs at most (``hunt_space``)."""
    systems: tuple[str, ...] = ()
    """Empty: ``hunt_systems()``."""
    engine_model: str = _SWEEP_DEFAULTS.engine_model
    predictor: str = _SWEEP_DEFAULTS.predictor
    hardware: str = _SWEEP_DEFAULTS.hardware

    def __post_init__(self) -> None:
        if self.budget < 1 or self.round_size < 1 or self.num_parents < 1:
            raise ValueError("budget, round_size and num_parents must be >= 1")
        if not 0 < self.random_share <= 1:
            raise ValueError(f"random_share must be in (0, 1], got {self.random_share}")
        if self.num_confirm < 0 or self.confirm_replications < 1:
            raise ValueError("need num_confirm >= 0 and confirm_replications >= 1")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if not 0 <= self.seed <= MAX_HUNT_SEED or self.budget > SEEDS_PER_HUNT:
            raise ValueError(
                f"need a seed in [0, {MAX_HUNT_SEED}] and a budget of at most {SEEDS_PER_HUNT} "
                "(a hunt's draw seeds stay in its namespace)"
            )
        names = self.systems or hunt_systems()
        if HEDDLE not in names or not any(SYSTEMS[n].kind == "baseline" for n in names):
            raise ValueError("a hunt needs heddle and at least one baseline")

    @property
    def num_random(self) -> int:
        return max(1, math.ceil(self.budget * self.random_share))

    def sweep_config(self, replications: int = 1) -> SweepConfig:
        """The settings ``run_cell`` runs a hunt cell with."""
        return SweepConfig(
            systems=self.systems or hunt_systems(),
            engine_model=self.engine_model,
            predictor=self.predictor,
            hardware=self.hardware,
            replications=replications,
            with_corpus=False,
        )


@dataclass(frozen=True, slots=True)
class HuntFinding:
    """One searched cell: its point, where it came from, and every system's run."""

    index: int
    phase: HuntPhase
    parent: int | None
    point: HuntPoint
    result: CellResult
    confirmed: CellResult | None = None
    """The cell on ``confirm_replications`` epochs (for the confirmed worst)."""

    @property
    def judged(self) -> CellResult:
        """The confirmed result where there is one, else the search's."""
        return self.confirmed or self.result

    @property
    def ratios(self) -> CellRatios:
        return cell_ratios(self.judged)

    @property
    def over_best_baseline(self) -> float:
        """heddle / best baseline (0 when either failed: never a worst cell)."""
        return self.ratios.heddle_over_best_baseline or 0.0

    @property
    def over_best_ablation(self) -> float:
        """heddle / its fastest ``heddle-*`` ablation (0 when none ran)."""
        return max(ablation_ratios(self.ratios).values(), default=0.0)

    @property
    def score(self) -> float:
        """How badly heddle loses here: the larger of the two ratios."""
        return max(self.over_best_baseline, self.over_best_ablation)


def ablation_ratios(ratios: CellRatios) -> dict[str, float]:
    """heddle over each ``heddle-*`` ablation."""
    return {n: r for n, r in ratios.heddle_over.items() if n.startswith(f"{HEDDLE}-")}


@dataclass(frozen=True, slots=True)
class Hunt:
    config: HuntConfig
    findings: list[HuntFinding]
    """Every searched cell, in index order (confirmed ones carry their confirmation)."""
    wall_s: float
    cpu_s: float
    """CPU seconds of every cell run (their cost on idle cores)."""


Report = Callable[[HuntFinding, str], None]
"""Hears of each cell as it finishes, with its stage (``random``, ``local``, ``confirm``)."""


def run_hunt(config: HuntConfig, jobs: int = 2, on_done: Report | None = None) -> Hunt:
    """The three phases of the module doc, ``jobs`` cells at a time."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    start = time.perf_counter()
    report = on_done or (lambda finding, stage: None)
    points = [
        (index, None, draw_point(random.Random(hunt_seed(config.seed, index)), seed))
        for index in range(config.num_random)
        for seed in (hunt_seed(config.seed, index),)
    ]
    findings = _evaluate(points, "random", config, jobs, report)
    while len(findings) < config.budget:
        size = min(config.round_size, config.budget - len(findings))
        findings += _evaluate(_children(findings, size, config), "local", config, jobs, report)
    findings = _confirm(findings, config, jobs, report)
    cpu_s = sum(f.result.cpu_s + (f.confirmed.cpu_s if f.confirmed else 0.0) for f in findings)
    return Hunt(config, findings, time.perf_counter() - start, cpu_s)


def _evaluate(
    points: Sequence[tuple[int, int | None, HuntPoint]],
    phase: HuntPhase,
    config: HuntConfig,
    jobs: int,
    report: Report,
) -> list[HuntFinding]:
    by_index = {index: (parent, point) for index, parent, point in points}
    cells = [point.cell(index, config.max_steps) for index, _, point in points]
    findings: list[HuntFinding] = []
    for result in run_in_pool(run_cell, cells, config.sweep_config(), jobs):
        parent, point = by_index[result.cell.index]
        finding = HuntFinding(result.cell.index, phase, parent, point, result)
        findings.append(finding)
        report(finding, phase)
    return sorted(findings, key=lambda f: f.index)


def _children(
    findings: Sequence[HuntFinding], size: int, config: HuntConfig
) -> list[tuple[int, int | None, HuntPoint]]:
    """The next round: ``size`` mutations of the worst cells so far (alternately the worst by
    each ratio), child ``k`` from its own seed; a mutation that lands on a point already run
    (a step clipped at a range's end, a field the workload ignores) is drawn again."""
    parents = worst_of_both(findings, config.num_parents)
    seen = {finding.point for finding in findings}
    children: list[tuple[int, int | None, HuntPoint]] = []
    for offset in range(size):
        index = len(findings) + offset
        parent = parents[offset % len(parents)]
        seed = hunt_seed(config.seed, index)
        rng = random.Random(seed)
        child = mutate_point(parent.point, rng, seed)
        for _ in range(_REDRAWS):
            if child not in seen:
                break
            child = mutate_point(parent.point, rng, seed)
        seen.add(child)
        children.append((index, parent.index, child))
    return children


def worst_of_both(findings: Iterable[HuntFinding], count: int) -> list[HuntFinding]:
    """Up to ``count`` distinct cells, alternately the next worst by heddle / best baseline
    and by heddle / best ablation (ties: the earlier cell); a cell that is the same finding as
    one chosen (``is_same_finding``) is passed over."""
    ranked = [
        sorted(findings, key=lambda f: (-key(f), f.index))
        for key in (_over_baseline, _over_ablation)
    ]
    chosen: dict[int, HuntFinding] = {}
    for rank in range(max((len(r) for r in ranked), default=0)):
        for order in ranked:
            if rank >= len(order) or len(chosen) == count or order[rank].index in chosen:
                continue
            candidate = order[rank]
            if not any(_same(candidate, other) for other in chosen.values()):
                chosen[candidate.index] = candidate
    return list(chosen.values())


def is_same_finding(
    first: Mapping[str, float], second: Mapping[str, float], tolerance: float = SAME_FINDING
) -> bool:
    """Whether two cells' makespans by system (the same systems, each within ``tolerance``)
    say the same thing: a mutation that barely moved the workload (cell 44 of the first hunt
    ran cell 33 again, a test-time spread 0.4% of its range apart)."""
    return first.keys() == second.keys() and all(
        abs(first[name] / second[name] - 1) <= tolerance for name in first
    )


def _same(first: HuntFinding, second: HuntFinding) -> bool:
    return is_same_finding(_makespans(first), _makespans(second))


def _makespans(finding: HuntFinding) -> dict[str, float]:
    return {name: run.makespan_s for name, run in finding.result.runs.items()}


def _over_baseline(finding: HuntFinding) -> float:
    return finding.over_best_baseline


def _over_ablation(finding: HuntFinding) -> float:
    return finding.over_best_ablation


def _confirm(
    findings: list[HuntFinding], config: HuntConfig, jobs: int, report: Report
) -> list[HuntFinding]:
    chosen = worst_of_both(findings, config.num_confirm) if config.num_confirm else []
    if not chosen or config.confirm_replications == 1:
        return findings
    by_index = {f.index: f for f in findings}
    cells = [f.result.cell for f in chosen]
    settings = config.sweep_config(config.confirm_replications)
    for result in run_in_pool(run_cell, cells, settings, jobs):
        finding = replace(by_index[result.cell.index], confirmed=result)
        by_index[finding.index] = finding
        report(finding, "confirm")
    return [by_index[f.index] for f in findings]
