"""``PresortedPlacer`` (Heddle, paper s.5): the initial placement is the presorted partition of
the predicted lengths over the workers (``partition_heterogeneous``: each worker its own TP
degree, so its own per-token time and interference); each later step stays on its worker; new
predictions go through the migration planner (``heddle.policy.migration.planner``), which names a
target when a trajectory's rank leaves its worker's rescaled share.

A trajectory's length is its predicted output plus its predicted tool seconds in token
equivalents (at the fastest worker's per-token time, so tools weigh at least what they take
anywhere): the paper sorts by tokens, but a trajectory with few tokens and long test runs is as
critical as a long one, and ranking it among the short ones puts it in a crowded group. Two
guards of ``heddle.policy.placement.robust``: block sizes are hedged towards equal groups against
prediction errors, and a memory-bound rollout is spread by LPT list scheduling instead of
contiguous groups (no rank shares then, so no rank migrations). Where the rank planner leaves a
trajectory in place, a re-balancing move (``heddle.policy.placement.rebalance``) may still send it
to a worker where it and that worker's longest finish sooner: ranks are only as good as the first
predictions, batch sizes are known. Both kinds of move weigh weight swaps: the load pause of a
worker that must swap first, and no re-prefill penalty for a trajectory whose KV a swap makes
stale (it re-prefills wherever it runs).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from heddle.control.placement.placer import Assignment, PlacementRequest, WorkerInfo
from heddle.control.placement.remaining import RemainingByWorker
from heddle.control.resources import (
    DEFAULT_OBSERVATION_RATIO,
    AgenticCostModel,
    representative_context,
    worker_model,
)
from heddle.policy.cost.model import CostModel
from heddle.policy.migration.planner import (
    MigrationPlanner,
    MigrationRequest,
    WorkerShare,
    estimate_move,
    shares_from_partition,
)
from heddle.policy.placement.blocks import Partition
from heddle.policy.placement.presorted import partition_heterogeneous
from heddle.policy.placement.rebalance import WorkerQueue, rebalance_target
from heddle.policy.placement.robust import hedged, interleaved, is_memory_bound


@dataclass(frozen=True, slots=True)
class _Move:
    """What a move of the trajectory just predicted would cost and wait for."""

    remaining_tokens: float
    context_tokens: int
    costs_no_prefill: bool
    """Its KV moves with it, or a weight swap makes it stale wherever it runs."""
    pauses: Mapping[str, float] | None
    """Per worker that must swap weights first, its load pause."""

    def pause_s(self, worker_id: str) -> float:
        return self.pauses.get(worker_id, 0.0) if self.pauses else 0.0


class PresortedPlacer:
    """Heddle's placement: presorted partition at the start, migrations on new predictions."""

    needs_predictions = True

    def __init__(
        self,
        cost_for_tp: Callable[[int], CostModel],
        *,
        migration: bool = True,
        kv_transfer: bool = True,
        hysteresis: float = 0.25,
        observation_ratio: float = DEFAULT_OBSERVATION_RATIO,
        tool_s_per_token: float = 0.0,
        hedge: float = 0.0,
        interleave_when_memory_bound: bool = True,
        rebalance: bool = True,
    ) -> None:
        """``hedge``: how far block sizes move towards equal groups (0 for exact predictions);
        ``interleave_when_memory_bound``: spread a memory-bound rollout by LPT instead;
        ``kv_transfer``: migrations move the KV (else the target re-prefills, a cost a move must
        earn back); ``rebalance``: with migration on, a trajectory the rank planner leaves in
        place may still move to shorten its batch's finish
        (``heddle.policy.placement.rebalance``)."""
        self._rebalance = rebalance and migration
        self._remaining = RemainingByWorker()
        """Predicted remaining output tokens of each tracked trajectory (last prediction)."""
        self._cost_of: dict[str, CostModel] = {}
        """Each placed worker's cost model (looked up once, at placement)."""
        self._kv_transfer = kv_transfer
        self._tp_of: dict[str, int] = {}
        self._num_on: Counter[str] = Counter()
        """Trajectories per worker (``_worker_of`` counted, kept as it changes)."""
        self._hedge = hedge
        self._interleave = interleave_when_memory_bound
        self._cost_for_tp = cost_for_tp
        self._observation_ratio = observation_ratio
        self._tool_s_per_token = tool_s_per_token
        self._migration = migration
        self._hysteresis = hysteresis
        self._planner: MigrationPlanner | None = None
        self._shares: list[WorkerShare] = []
        self._worker_of: dict[str, str] = {}
        self._predicted: dict[str, float] = {}
        self._seconds_per_token = 0.0

    def route_first(self, traj_id: str, loads: Mapping[str, int]) -> str:
        """``place`` assigns every trajectory; one it never saw starts on the least loaded."""
        return min(loads, key=lambda worker_id: (loads[worker_id], worker_id))

    def token_equivalents(self, tool_s: float) -> float:
        return tool_s / self._seconds_per_token if self._seconds_per_token > 0 else 0.0

    def place(
        self, trajectories: Sequence[PlacementRequest], workers: Sequence[WorkerInfo]
    ) -> list[Assignment]:
        tokens = [max(0.0, t.predicted_remaining_tokens) for t in trajectories]
        prompts = [t.prompt_tokens for t in trajectories]
        context = representative_context(prompts, tokens, self._observation_ratio)
        costs = [self._cost_for_tp(w.tp_degree) for w in workers]
        self._seconds_per_token = min(cost.solo_token_s(context) for cost in costs)
        lengths = [
            n + self.token_equivalents(max(0.0, t.predicted_remaining_tool_s))
            for n, t in zip(tokens, trajectories, strict=True)
        ]
        split, contiguous = self._split(lengths, prompts, tokens, costs, context)
        worker_ids = [worker.worker_id for worker in workers]
        self._tp_of = {worker.worker_id: worker.tp_degree for worker in workers}
        self._cost_of = {w.worker_id: cost for w, cost in zip(workers, costs, strict=True)}
        ranks = sorted(range(len(lengths)), key=lambda index: (-lengths[index], index))
        rank_of = {index: rank for rank, index in enumerate(ranks)}
        assignments = [
            Assignment(trajectories[index].traj_id, worker_ids[worker], rank_of[index])
            for worker, group in enumerate(split.groups)
            for index in group
        ]
        assignments.sort(key=lambda assignment: assignment.rank)
        if contiguous:
            self._shares = shares_from_partition(split, lengths, worker_ids)
            self._planner = MigrationPlanner(self._shares, self._hysteresis)
        for assignment in assignments:
            predicted = lengths[ranks[assignment.rank]]
            self._track(assignment.traj_id, assignment.worker_id, predicted)
        return assignments

    def _split(
        self,
        lengths: list[float],
        prompts: list[int],
        tokens: list[float],
        costs: list[CostModel],
        context: int,
    ) -> tuple[Partition, bool]:
        """The groups of trajectory indices per worker, and whether they are contiguous in
        length order (rank shares the migration planner can keep)."""
        capacities = [cost.max_kv_tokens for cost in costs]
        if self._interleave and is_memory_bound(
            prompts, tokens, self._observation_ratio, capacities
        ):
            return interleaved(lengths, [max(1, c) for c in capacities]), False
        models = [
            worker_model(AgenticCostModel(cost, self._tool_s_per_token), context) for cost in costs
        ]
        return hedged(partition_heterogeneous(lengths, models), lengths, self._hedge), True

    def route(
        self, traj_id: str, current_worker_id: str, context_tokens: int, loads: Mapping[str, int]
    ) -> str:
        return current_worker_id

    def on_prediction(
        self,
        traj_id: str,
        predicted: float,
        *,
        remaining_tokens: float = 0.0,
        context_tokens: int = 0,
        kv_is_stale: bool = False,
        pauses: Mapping[str, float] | None = None,
    ) -> MigrationRequest | None:
        if traj_id not in self._predicted:
            return None
        self._predicted[traj_id] = predicted
        self._remaining.set(traj_id, self._worker_of[traj_id], remaining_tokens)
        move = _Move(remaining_tokens, context_tokens, self._kv_transfer or kv_is_stale, pauses)
        if self._planner is not None:
            request = self._planner.update(traj_id, predicted)
            if request is not None and self._migration and self._rank_move_pays(request, move):
                return request
        return self._rebalancing_move(traj_id, predicted, move)

    def _rank_move_pays(self, request: MigrationRequest, move: _Move) -> bool:
        if request.by_rescaling and self._is_slower(request.target_id, request.source_id):
            return False  # others finishing must not push a straggler onto a lower TP degree
        return self._pays(request, move)

    def _rebalancing_move(
        self, traj_id: str, predicted: float, move: _Move
    ) -> MigrationRequest | None:
        if not self._rebalance:
            return None
        source_id = self._worker_of[traj_id]
        queues = {
            worker_id: WorkerQueue(
                worker_id,
                self._cost_of[worker_id],
                self._remaining.num_on(worker_id),
                self._remaining.longest_on(worker_id),
                move.pause_s(worker_id),
            )
            for worker_id in self._tp_of
        }
        if source_id not in queues or not queues[source_id].batch:
            return None
        target = rebalance_target(
            move.remaining_tokens,
            queues[source_id],
            [queue for worker_id, queue in queues.items() if worker_id != source_id],
            context_tokens=move.context_tokens,
            kv_transfer=move.costs_no_prefill,
        )
        if target is None:
            return None
        rank = self._planner.rank_of(traj_id) if self._planner is not None else 0
        return MigrationRequest(traj_id, source_id, target, rank, predicted)

    def _is_slower(self, target_id: str, source_id: str) -> bool:
        return self._tp_of.get(target_id, 0) < self._tp_of.get(source_id, 0)

    def _pays(self, request: MigrationRequest, move: _Move) -> bool:
        """A move happens only when its predicted gain exceeds its cost (``estimate_move``)."""
        source_tp = self._tp_of.get(request.source_id)
        target_tp = self._tp_of.get(request.target_id)
        if source_tp is None or target_tp is None:
            return True  # a worker registered after placement: nothing to weigh it by
        estimate = estimate_move(
            self._cost_for_tp(source_tp),
            self._cost_for_tp(target_tp),
            source_batch=self._num_on[request.source_id],
            target_batch=self._num_on[request.target_id],
            context_tokens=move.context_tokens,
            remaining_tokens=move.remaining_tokens,
            kv_transfer=move.costs_no_prefill,
            source_pause_s=move.pause_s(request.source_id),
            target_pause_s=move.pause_s(request.target_id),
        )
        return estimate.pays

    def on_moved(self, traj_id: str, worker_id: str) -> None:
        if traj_id not in self._worker_of:
            return
        source_id = self._worker_of[traj_id]
        self._num_on[source_id] -= 1
        self._num_on[worker_id] += 1
        self._remaining.set(traj_id, worker_id, self._remaining.get(traj_id))
        self._worker_of[traj_id] = worker_id
        if self._planner is not None:
            self._planner.moved(traj_id, worker_id)

    def on_finished(self, traj_id: str) -> None:
        if self._predicted.pop(traj_id, None) is None:
            return
        self._remaining.drop(traj_id)
        self._num_on[self._worker_of.pop(traj_id)] -= 1
        if self._planner is not None:
            self._planner.remove(traj_id)

    def on_worker_failed(self, worker_id: str) -> None:
        """Drop the worker's share: the planner restarts from the surviving shares."""
        self._tp_of.pop(worker_id, None)  # no move targets it any more
        if self._planner is None:
            return
        self._shares = [share for share in self._shares if share.worker_id != worker_id]
        if sum(share.num_ranks for share in self._shares) <= 0:
            self._planner = None  # no surviving share: stop migrating
            return
        self._planner = MigrationPlanner(self._shares, self._hysteresis)
        for traj_id, worker in self._worker_of.items():
            self._planner.add(traj_id, worker, self._predicted[traj_id])

    def on_worker_resized(self, worker_id: str, tp_degree: int) -> None:
        """Weigh the worker at its new degree from now on (its rank share stays its own)."""
        if worker_id in self._tp_of:
            self._tp_of[worker_id] = tp_degree
            self._cost_of[worker_id] = self._cost_for_tp(tp_degree)

    def snapshot(self) -> object:
        ranks = None
        if self._planner is not None:
            ranks = {traj_id: self._planner.rank_of(traj_id) for traj_id in self._worker_of}
        shares = list(self._shares)
        return dict(self._worker_of), dict(self._predicted), shares, ranks, self._seconds_per_token

    def _track(self, traj_id: str, worker_id: str, predicted: float) -> None:
        self._worker_of[traj_id] = worker_id
        self._num_on[worker_id] += 1
        self._remaining.set(traj_id, worker_id, predicted)
        self._predicted[traj_id] = predicted
        if self._planner is not None:
            self._planner.add(traj_id, worker_id, predicted)
