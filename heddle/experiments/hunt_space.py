"""The hunter's search space (``heddle sim hunt``): a point is a workload of the zoo's ``wide``
family (``heddle.workloads.zoo_wide``: turns, output lengths, tools, observations, contexts,
prompts, groups), a seed, and the cluster it runs on: the model, 8-64 GPUs, 1-128 trajectories
per GPU, a KV footprint / capacity ratio of 0.2-5 (``heddle.experiments.kv_pressure``) and the
history it is judged with (``heddle.workloads.history``: none, other prompts, the same prompts).
Same point, same traces: a cell is its parameters and its seed.

Size: a point asks for ``trajectories_per_gpu * num_gpus`` trajectories, but a cell runs at
most ``max_steps`` steps (the sweep's reason: a simulation's cost grows with its steps), so the
rollout is cut after the last whole trajectory within them. The density per GPU is what makes
batches and queues contend, so when the cut leaves too few trajectories for it, the cell runs on
the GPU count of ``HUNT_GPU_COUNTS`` (at most the one asked) whose density is nearest the one
asked (``gpus_for``); the GPUs and the density a cell ran at are reported with it
(``heddle.experiments.hunt_report``).

``draw_point`` draws every dimension uniformly (log-uniformly where its range is log);
``mutate_point`` moves one to three dimensions of a point by a normal step of ``step`` of their
(log) range, and with probability ``reseed_probability`` draws a new seed, which tells a
workload that loses from a sample that loses.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from heddle.experiments.cells import SEED_NAMESPACE, Cell
from heddle.traces import TraceTrajectory
from heddle.workloads.history import HISTORY_KINDS, HistoryKind, make_history
from heddle.workloads.zoo import WIDE, LeafParams, zoo_family
from heddle.workloads.zoo_ranges import Range, draw_params, log_range
from heddle.workloads.zoo_wide import WideParams

HUNT_MODELS = ("qwen3-8b", "qwen3-32b")
HUNT_GPU_COUNTS = (8, 16, 32, 64)
TRAJECTORIES_PER_GPU = log_range(1, 128)
KV_RATIOS = log_range(0.2, 5.0)
HUNT_SEED_BASE = 2 * SEED_NAMESPACE
"""Hunt seeds are ``HUNT_SEED_BASE + hunt seed * 10**6 + k``: apart from the sweep's tuning
seeds (below 2**40) and its held-out ones (odd namespaces,
``heddle.experiments.cells.SEED_NAMESPACE``)."""
SEEDS_PER_HUNT = 10**6
MAX_HUNT_SEED = SEED_NAMESPACE // SEEDS_PER_HUNT - 1
"""The largest hunt seed whose draws stay in the hunter's namespace."""
MUTATION_STEP = 0.15
RESEED_PROBABILITY = 0.25
_CLUSTER_DIMENSIONS = ("model", "num_gpus", "trajectories_per_gpu", "kv_ratio", "history")
_Map = Callable[[float], float]
_FIRST_DRAW = 64


@dataclass(frozen=True, slots=True)
class HuntPoint:
    """One cell of the hunter's space: a workload, its seed and its cluster."""

    params: WideParams
    seed: int
    model: str
    num_gpus: int
    trajectories_per_gpu: float
    kv_ratio: float
    """The target KV ratio."""
    history: HistoryKind

    @property
    def num_trajectories(self) -> int:
        """Trajectories asked for (at least one)."""
        return max(1, round(self.trajectories_per_gpu * self.num_gpus))

    def source(self, max_steps: int) -> GeneratedSource:
        """Its traces, cut to ``max_steps`` steps."""
        return GeneratedSource(WIDE, self.params, self.num_trajectories, max_steps)

    def cell(self, index: int, max_steps: int) -> Cell:
        """The cell it runs as: its rollout cut to ``max_steps``, on ``gpus_for`` GPUs."""
        kept = len(self.source(max_steps).rollout(self.seed, epoch=0))
        return Cell(
            index=index,
            family=WIDE,
            draw_seed=self.seed,
            model=self.model,
            num_gpus=gpus_for(kept, self.trajectories_per_gpu, self.num_gpus),
            kv_ratio=self.kv_ratio,
            history=self.history,
            source=self.source(max_steps),
        )


@dataclass(frozen=True, slots=True)
class GeneratedSource:
    """A cell's traces drawn from a leaf family's parameter record: ``num_trajectories`` of
    epoch ``2r`` (replication ``r``) cut to ``max_steps`` steps (None: not cut), and the
    cell's kind of history of as many trajectories."""

    family: str
    params: LeafParams
    num_trajectories: int
    max_steps: int | None

    def traces(
        self, cell: Cell, replication: int
    ) -> tuple[list[TraceTrajectory], list[TraceTrajectory]]:
        trace = self.rollout(cell.draw_seed, 2 * replication)
        family = zoo_family(self.family)

        def sample(seed: int, epoch: int) -> list[TraceTrajectory]:
            return family.generate(self.params, len(trace), seed, epoch=epoch)

        return trace, make_history(cell.history, sample, cell.draw_seed, replication)

    def rollout(self, seed: int, epoch: int) -> list[TraceTrajectory]:
        """The rollout of ``seed`` at ``epoch``: the first ``num_trajectories`` cut to
        ``max_steps``. Drawn in doubling prefixes (a leaf family's shorter trace is a prefix of
        a longer one), so a cut rollout never draws the thousands of trajectories asked."""
        family = zoo_family(self.family)
        if self.max_steps is None:
            return family.generate(self.params, self.num_trajectories, seed, epoch=epoch)
        count = min(self.num_trajectories, _FIRST_DRAW)
        while True:
            drawn = family.generate(self.params, count, seed, epoch=epoch)
            kept = within_steps(drawn, self.max_steps)
            if len(kept) < len(drawn) or count == self.num_trajectories:
                return kept
            count = min(self.num_trajectories, 2 * count)


def within_steps(trace: list[TraceTrajectory], max_steps: int) -> list[TraceTrajectory]:
    """The longest prefix of ``trace`` with at most ``max_steps`` steps (at least one
    trajectory)."""
    steps = 0
    for index, trajectory in enumerate(trace):
        steps += len(trajectory.steps)
        if steps > max_steps:
            return trace[: max(1, index)]
    return trace


def gpus_for(num_trajectories: int, trajectories_per_gpu: float, most_gpus: int) -> int:
    """The count of ``HUNT_GPU_COUNTS`` up to ``most_gpus`` on which ``num_trajectories`` come
    nearest ``trajectories_per_gpu`` (in ratio; a tie goes to more GPUs)."""
    counts = [count for count in HUNT_GPU_COUNTS if count <= most_gpus] or [min(HUNT_GPU_COUNTS)]
    target = math.log(trajectories_per_gpu)
    return min(counts, key=lambda c: (abs(math.log(num_trajectories / c) - target), -c))


def hunt_seed(hunt_seed_base: int, index: int) -> int:
    """The seed of a hunt's ``index``-th drawn point."""
    return HUNT_SEED_BASE + hunt_seed_base * SEEDS_PER_HUNT + index


def draw_point(rng: random.Random, seed: int) -> HuntPoint:
    """A point with every dimension drawn from its range (uniform choices for the model, the
    GPU count and the history)."""
    return HuntPoint(
        params=draw_params(WideParams, rng),
        seed=seed,
        model=rng.choice(HUNT_MODELS),
        num_gpus=rng.choice(HUNT_GPU_COUNTS),
        trajectories_per_gpu=TRAJECTORIES_PER_GPU.draw(rng),
        kv_ratio=KV_RATIOS.draw(rng),
        history=rng.choice(HISTORY_KINDS),
    )


def mutate_point(
    point: HuntPoint,
    rng: random.Random,
    new_seed: int,
    step: float = MUTATION_STEP,
    reseed_probability: float = RESEED_PROBABILITY,
) -> HuntPoint:
    """``point`` with one to three dimensions moved (``step``: the normal step's standard
    deviation, as a share of the dimension's range) and, with ``reseed_probability``, the seed
    ``new_seed``."""
    names = [item.name for item in fields(WideParams)] + list(_CLUSTER_DIMENSIONS)
    workload: dict[str, Any] = {}
    cluster: dict[str, Any] = {}
    for name in rng.sample(names, rng.randint(1, 3)):
        if name in WideParams.RANGES:
            span = WideParams.RANGES[name]
            workload[name] = moved(span, getattr(point.params, name), rng, step)
        else:
            cluster[name] = _moved_cluster(point, name, rng, step)
    seed = new_seed if rng.random() < reseed_probability else point.seed
    return replace(point, params=replace(point.params, **workload), seed=seed, **cluster)


def moved(span: Range, value: float, rng: random.Random, step: float) -> float | int:
    """``value`` moved by a normal step of ``step`` of ``span`` (in log space for a log range),
    at least a third of ``step`` (a smaller one ran the same cell again: a test-time spread
    moved by 0.4% of its range), kept inside it (integer for an integer range)."""
    to_unit, from_unit = _unit_maps(span)
    delta = rng.gauss(0.0, step)
    delta = math.copysign(max(abs(delta), step / 3), delta)
    unit = min(1.0, max(0.0, to_unit(value) + delta))
    result = min(span.high, max(span.low, from_unit(unit)))
    return round(result) if span.is_integer else result


def _unit_maps(span: Range) -> tuple[_Map, _Map]:
    if span.is_log:
        low, high = math.log(span.low), math.log(span.high)
        return (
            lambda v: (math.log(v) - low) / (high - low),
            lambda u: math.exp(low + u * (high - low)),
        )
    width = span.high - span.low or 1.0
    return (lambda v: (v - span.low) / width, lambda u: span.low + u * width)


def _moved_cluster(point: HuntPoint, name: str, rng: random.Random, step: float) -> object:
    if name == "model":
        return HUNT_MODELS[1 - HUNT_MODELS.index(point.model)]
    if name == "num_gpus":
        index = HUNT_GPU_COUNTS.index(point.num_gpus) + rng.choice((-1, 1))
        return HUNT_GPU_COUNTS[min(len(HUNT_GPU_COUNTS) - 1, max(0, index))]
    if name == "history":
        return rng.choice([kind for kind in HISTORY_KINDS if kind != point.history])
    span = TRAJECTORIES_PER_GPU if name == "trajectories_per_gpu" else KV_RATIOS
    return moved(span, getattr(point, name), rng, step)
