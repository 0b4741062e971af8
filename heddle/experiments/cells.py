"""A sweep's cell (one workload draw on one cluster under one KV pressure, judged with one
history) and how cells are numbered: the splits and their draw-seed namespaces. The sweep
(``heddle.experiments.sweep``), the hunter's points (``heddle.experiments.hunt_space``) and the
corpus (``heddle.experiments.corpus``) build on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from heddle.traces import TraceTrajectory
from heddle.workloads.history import DEFAULT_HISTORY, HistoryKind

CellSplit = Literal["tuning", "heldout", "corpus"]
Split = Literal["tuning", "heldout", "corpus", "all"]
SPLITS: tuple[Split, ...] = ("tuning", "heldout", "corpus", "all")
HELDOUT_GENERATION = 1
"""Bumped whenever a decision (a rule, a threshold, a default) has been made by looking at the
held-out cells: their draw seeds then move to a namespace never run before."""
SEED_NAMESPACE = 1 << 40
"""Draw seeds come in namespaces this wide: the tuning seeds stay below it, held-out generation
``g`` takes the ``2g - 1``-th (odd multiples), the hunter the even ones
(``heddle.experiments.hunt_space.HUNT_SEED_BASE``): a bump never lands on cells the hunter ran."""


def heldout_seed_base(generation: int) -> int:
    """The first held-out draw seed of ``generation`` (>= 1)."""
    if generation < 1:
        raise ValueError(f"held-out generations start at 1, got {generation}")
    return (2 * generation - 1) * SEED_NAMESPACE


HELDOUT_SEED_BASE = heldout_seed_base(HELDOUT_GENERATION)
"""Held-out draw seeds are ``HELDOUT_SEED_BASE + seed * 100000 + k``: no sweep, probe or
decision before generation 1 (this commit's) ran one; the tuning seeds stay below 2**40."""


class CellSource(Protocol):
    """Where a cell's traces come from when they are not a zoo draw (the hunter's cells, the
    corpus): a frozen, picklable value."""

    def traces(
        self, cell: Cell, replication: int
    ) -> tuple[list[TraceTrajectory], list[TraceTrajectory]]: ...


@dataclass(frozen=True, slots=True)
class Cell:
    index: int
    family: str
    draw_seed: int
    model: str
    num_gpus: int
    kv_ratio: float
    """The target KV ratio."""
    split: CellSplit = "tuning"
    history: HistoryKind = DEFAULT_HISTORY
    source: CellSource | None = None
    """Its traces, when not the zoo family's draw of ``draw_seed``."""
