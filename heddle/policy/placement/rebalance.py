"""Re-balancing moves: a trajectory in its tool gap moves when that shortens the slower of its
two workers' estimated finishes.

The presorted partition (``heddle.policy.placement.presorted``) and the rank-based migration planner
(``heddle.policy.migration.planner``) place by *predicted* lengths. Where the first predictions know
little (a math agent's reasoning length is not in its prompt), the partition's groups are
uneven for no reason and a long trajectory predicted short sits in a crowded batch; rank moves
do not fix that, since the ranks are as wrong as the predictions. A re-balancing move looks at
the batches instead: a worker's estimated finish is its longest predicted remaining output
times its per-token step time at its batch size (``CostModel.decode_step_s``; every context
counted at the mover's size), and a move from ``source`` to ``target`` is taken when the
larger of the two finishes after it (the mover paying its re-prefill at the target when the KV
does not move) is below ``1 - margin`` of the larger before it. Among the workers where it
does, the one with the largest relative gain wins (ties: the first given). Each move can only
lower that pairwise finish, so moves do not cycle; ``margin`` keeps a move worth its churn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.policy.cost.model import CostModel

DEFAULT_REBALANCE_MARGIN = 0.1
"""The relative gain below which a move is not worth its disruption (assumption)."""


@dataclass(frozen=True, slots=True)
class WorkerQueue:
    """One worker as the re-balancer sees it: its batch and its longest predicted remaining
    output (tokens)."""

    worker_id: str
    cost: CostModel
    batch: int
    longest_remaining: float


def finish_s(cost: CostModel, batch: int, longest_remaining: float, context_tokens: int) -> float:
    """Estimated seconds until a worker's longest trajectory is done at this batch size."""
    if batch <= 0:
        return 0.0
    return max(0.0, longest_remaining) * cost.decode_step_s(batch, batch * context_tokens)


def rebalance_target(
    mover_remaining: float,
    source: WorkerQueue,
    others: Sequence[WorkerQueue],
    *,
    context_tokens: int,
    kv_transfer: bool,
    margin: float = DEFAULT_REBALANCE_MARGIN,
) -> str | None:
    """The worker the mover (on ``source``, counted in its batch) should go to, or None where
    no move gains more than ``margin``. ``ValueError`` for an empty source or ``margin``
    outside [0, 1)."""
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    if source.batch < 1:
        raise ValueError("the source holds no trajectory: the mover must be counted on it")
    context = max(1, context_tokens)
    mover_before = max(0.0, mover_remaining) * source.cost.decode_step_s(
        source.batch, source.batch * context
    )
    best, best_gain = None, -math.inf
    for target in others:
        before = max(
            mover_before,
            finish_s(target.cost, target.batch, target.longest_remaining, context),
        )
        batch = target.batch + 1
        step_s = target.cost.decode_step_s(batch, batch * context)
        mover_s = max(0.0, mover_remaining) * step_s
        if not kv_transfer:
            mover_s += target.cost.prefill_s(context)
        residents_s = max(0.0, target.longest_remaining) * step_s if target.batch else 0.0
        after = max(residents_s, mover_s)
        if before <= 0 or after >= before * (1.0 - margin):
            continue
        gain = 1.0 - after / before
        if gain > best_gain:
            best, best_gain = target.worker_id, gain
    return best
