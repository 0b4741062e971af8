"""Migration planning after a prediction changes (docs/paper.md, the paper's s.5.3).

The last partition gave worker ``i`` a run of ``c_i`` consecutive ranks of the sorted order
(longest predicted first). As trajectories finish, the shares are rescaled to the ``n*`` still
active: ``capacity_i = c_i * n* / n``. When one trajectory's prediction changes, its new rank
``r`` among the active ones names the worker whose rescaled run contains it; if that is not
its current worker, it should migrate (in its next tool-call gap; the caller decides when).

Incremental: the active trajectories live in one list sorted by (-predicted, id), updated with
``bisect`` (a C-speed ``memmove`` per change, no re-sort), and the rank-to-worker map is a bisect
over the cumulative shares: microseconds per prediction at 6400 trajectories.

Hysteresis: a trajectory stays where it is while its scaled rank lies within ``hysteresis`` of
its current worker's share beyond either edge of that worker's run, so a prediction wobbling
around a group boundary does not bounce it between two workers. A move that only the
rescaling calls for (its rank in the original partition is still its worker's) is flagged.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.policy.cost.model import CostModel
from heddle.policy.placement.blocks import Partition


@dataclass(frozen=True, slots=True)
class WorkerShare:
    worker_id: str
    num_ranks: float
    """``c_i``: how many consecutive ranks the last partition gave this worker (may be 0)."""


@dataclass(frozen=True, slots=True)
class MigrationRequest:
    traj_id: str
    source_id: str
    target_id: str
    rank: int
    """Rank among the active trajectories (0 = longest predicted)."""
    predicted_remaining_tokens: float
    by_rescaling: bool = False
    """Only the rescaling of shares calls for it: its rank in the original partition is still
    its worker's (see ``MigrationPlanner._unscaled_rank``)."""


class MigrationPlanner:
    """Tracks active trajectories, their predictions and workers; names migration targets.

    ``shares`` lists workers in rank order (the worker of the longest trajectories first), as
    ``shares_from_partition`` builds them. ``ValueError`` for unknown or duplicate trajectories,
    NaN predictions, negative shares or an out-of-range hysteresis.
    """

    def __init__(self, shares: Sequence[WorkerShare], hysteresis: float = 0.25) -> None:
        if not shares:
            raise ValueError("shares is empty: need at least one worker")
        if not 0.0 <= hysteresis <= 1.0:
            raise ValueError(f"hysteresis must be within [0, 1], got {hysteresis!r}")
        if any(not share.num_ranks >= 0.0 for share in shares):
            raise ValueError("every worker share must be >= 0")
        self._worker_ids = [share.worker_id for share in shares]
        self._position = {worker_id: i for i, worker_id in enumerate(self._worker_ids)}
        self._shares = [float(share.num_ranks) for share in shares]
        self._ends = _cumulative(self._shares)
        self._total = self._ends[-1]
        self._hysteresis = hysteresis
        self._sorted: list[tuple[float, str]] = []
        self._predicted: dict[str, float] = {}
        self._worker_of: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._predicted)

    def add(self, traj_id: str, worker_id: str, predicted_remaining_tokens: float) -> None:
        """Start tracking an active trajectory placed on ``worker_id``."""
        if traj_id in self._predicted:
            raise ValueError(f"trajectory {traj_id!r} is already tracked")
        _check_prediction(traj_id, predicted_remaining_tokens)
        self._predicted[traj_id] = predicted_remaining_tokens
        self._worker_of[traj_id] = worker_id
        insort(self._sorted, (-predicted_remaining_tokens, traj_id))

    def remove(self, traj_id: str) -> None:
        """The trajectory finished (or failed): it no longer counts towards ``n*``."""
        predicted = self._known(traj_id)
        del self._sorted[self._index(traj_id, predicted)]
        del self._predicted[traj_id]
        del self._worker_of[traj_id]

    def moved(self, traj_id: str, worker_id: str) -> None:
        """Record that the trajectory now lives on ``worker_id`` (a migration completed)."""
        self._known(traj_id)
        self._worker_of[traj_id] = worker_id

    def worker_of(self, traj_id: str) -> str:
        self._known(traj_id)
        return self._worker_of[traj_id]

    def rank_of(self, traj_id: str) -> int:
        return self._index(traj_id, self._known(traj_id))

    def update(self, traj_id: str, predicted_remaining_tokens: float) -> MigrationRequest | None:
        """Record a new prediction; the migration it calls for, if any."""
        old = self._known(traj_id)
        _check_prediction(traj_id, predicted_remaining_tokens)
        del self._sorted[self._index(traj_id, old)]
        self._predicted[traj_id] = predicted_remaining_tokens
        insort(self._sorted, (-predicted_remaining_tokens, traj_id))
        return self.plan(traj_id)

    def plan(self, traj_id: str) -> MigrationRequest | None:
        """The migration the trajectory's current rank calls for (None: stay)."""
        rank = self.rank_of(traj_id)
        source_id = self._worker_of[traj_id]
        scaled = self._scaled_rank(rank)
        if self._is_within_current(source_id, scaled):
            return None
        target_id = self._worker_ids[self._target_index(scaled)]
        if target_id == source_id:
            return None
        by_rescaling = self._is_within_current(source_id, self._unscaled_rank(rank))
        return MigrationRequest(
            traj_id, source_id, target_id, rank, self._predicted[traj_id], by_rescaling
        )

    def target_of_rank(self, rank: int) -> str:
        """The worker whose rescaled run contains ``rank`` (without hysteresis)."""
        if not 0 <= rank < len(self._sorted):
            raise ValueError(f"rank {rank} out of range for {len(self._sorted)} trajectories")
        return self._worker_ids[self._target_index(self._scaled_rank(rank))]

    def _scaled_rank(self, rank: int) -> float:
        """The rank's centre in units of the original partition: ``(r + 1/2) * n / n*``."""
        return (rank + 0.5) * self._total / len(self._sorted)

    def _unscaled_rank(self, rank: int) -> float:
        """The rank's centre in the original partition, as if nobody had finished. As a
        rollout drains, ``n / n*`` grows and carries even the longest trajectory out of the
        first (highest-TP) worker's small share into the middle of the order, onto whatever
        worker holds the middle ranks, just when it is the straggler that sets the makespan;
        such a move is flagged ``by_rescaling`` so the caller can refuse it where it would
        slow the trajectory down."""
        return rank + 0.5

    def _target_index(self, scaled: float) -> int:
        index = bisect_right(self._ends, scaled)
        while index < len(self._shares) - 1 and self._shares[index] == 0.0:
            index += 1
        return min(index, len(self._shares) - 1)

    def _is_within_current(self, worker_id: str, scaled: float) -> bool:
        position = self._position.get(worker_id)
        if position is None:
            return False
        share = self._shares[position]
        start = self._ends[position] - share
        margin = self._hysteresis * share
        return start - margin <= scaled < self._ends[position] + margin

    def _known(self, traj_id: str) -> float:
        predicted = self._predicted.get(traj_id)
        if predicted is None:
            raise ValueError(f"trajectory {traj_id!r} is not tracked")
        return predicted

    def _index(self, traj_id: str, predicted: float) -> int:
        return bisect_left(self._sorted, (-predicted, traj_id))


def shares_from_partition(
    partition: Partition, lengths: Sequence[float], worker_ids: Sequence[str]
) -> list[WorkerShare]:
    """Worker shares in rank order from a partition (groups in any worker order, indices into
    ``lengths``): the worker holding the longest trajectory first, empty workers last."""
    if len(worker_ids) != partition.num_workers:
        raise ValueError(
            f"{len(worker_ids)} worker ids for a partition of {partition.num_workers} workers"
        )

    def rank_key(worker: int) -> tuple[bool, float, int]:
        group = partition.groups[worker]
        longest = max((lengths[index] for index in group), default=0.0)
        return (not group, -longest, worker)

    order = sorted(range(partition.num_workers), key=rank_key)
    return [WorkerShare(worker_ids[w], float(len(partition.groups[w]))) for w in order]


def _cumulative(shares: Sequence[float]) -> list[float]:
    ends: list[float] = []
    total = 0.0
    for share in shares:
        total += share
        ends.append(total)
    if total <= 0.0:
        raise ValueError("worker shares sum to 0: nothing was placed")
    return ends


def _check_prediction(traj_id: str, predicted: float) -> None:
    if math.isnan(predicted):
        raise ValueError(f"trajectory {traj_id!r}: predicted remaining tokens is NaN")


@dataclass(frozen=True, slots=True)
class MoveEstimate:
    """What a migration is predicted to earn and to cost the moved trajectory, in seconds."""

    gain_s: float
    """Its predicted remaining tokens times how much faster a token is at the target (its
    batch there, one more, against its batch at the source), plus the weight-swap pause it
    no longer waits for at the source, less the one it meets at the target."""
    cost_s: float
    """Re-prefilling its context at the target when the engines cannot move KV (the prefill
    stalls the target's batch, the trajectory included); 0 when the KV moves in the tool gap."""

    @property
    def pays(self) -> bool:
        return self.gain_s > self.cost_s


def estimate_move(
    source: CostModel,
    target: CostModel,
    *,
    source_batch: int,
    target_batch: int,
    context_tokens: int,
    remaining_tokens: float,
    kv_transfer: bool,
    source_pause_s: float = 0.0,
    target_pause_s: float = 0.0,
) -> MoveEstimate:
    """Gain and cost of moving one trajectory of ``context_tokens`` from a worker running
    ``source_batch`` trajectories (itself included) to one running ``target_batch`` (without
    it); every trajectory's context counts as ``context_tokens`` (a representative size).
    ``kv_transfer``: the move costs no re-prefill (the KV moves, or it is stale anyway); the
    pauses: seconds each worker waits for a weight swap before its next step."""
    before = source.decode_step_s(max(1, source_batch), max(1, source_batch) * context_tokens)
    after_batch = target_batch + 1
    after = target.decode_step_s(after_batch, after_batch * context_tokens)
    gain_s = max(0.0, remaining_tokens) * (before - after) + source_pause_s - target_pause_s
    cost_s = 0.0 if kv_transfer else target.prefill_s(context_tokens)
    return MoveEstimate(gain_s, cost_s)
