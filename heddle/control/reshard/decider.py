"""The re-shard decider (ours, beyond the paper): as a rollout drains to a few stragglers, merge
workers of one node into one worker of a higher TP degree and move their trajectories there,
when the predicted saving exceeds the switch's cost by a margin
(``heddle.policy.resources.reshard``).

Consumes the workers' lifecycle (``WorkerRegistered`` with its node and GPUs, ``WorkerFailed``,
``WorkerRetired``) and the trajectories' facts (``ReshardView``). After a trajectory's event it
weighs, per node, the merges ``merge_groups`` proposes, and takes the one that saves most where
one pays; it weighs at most once per ``RECONSIDER_FRACTION`` of the switch's restart time, and
only when:

- no trajectory waits for admission (the cluster is still busy, not draining),
- no migration requested and not landed touches a member (its hand-over would race the
  retirement), and the node runs no re-shard already.

A re-shard is a ``ReshardRequested`` (on the subject of the *leader*: the member whose
trajectories finish last, which relaunches) and a ``Retire`` to every other member. Once every
other member's ``WorkerRetired`` is in (its GPUs are free), the leader gets ``Reshard`` with the
union of the GPUs; its ``WorkerRegistered`` at the new degree ends the re-shard. A member or the
leader failing meanwhile abandons it: the leader keeps its degree, and the GPUs of members that
retired stay idle for the rest of the rollout (a failure there is rare, and relaunching with a
degree the surviving GPUs do not form would be worse). The placement decider moves the retired
members' trajectories to the leader (``heddle.control.placement``).

Placed before the placement decider in a bundle, so that a ``WorkerRetired`` sends the leader
its ``Reshard`` before placement sends it the retired member's trajectories. Either order works
(live, the router goes first; commands take their own delays): a step started on the old engine
is interrupted by the relaunch and resumes after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from heddle.control.decider import Output
from heddle.control.reshard.view import ReshardView, WorkerSlot
from heddle.events import (
    Completed,
    Event,
    Failed,
    Generated,
    GenerationInterrupted,
    Migrated,
    MigrationRequested,
    Predicted,
    Reshard,
    ReshardRequested,
    Retire,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectoryPlaced,
    TrajectorySubmitted,
    WorkerFailed,
    WorkerRegistered,
    WorkerRetired,
)
from heddle.ids import derive_id
from heddle.policy.cost.model import TP_DEGREES, CostModel
from heddle.policy.resources.reshard import (
    RESHARD_MARGIN,
    Member,
    ReshardEstimate,
    Straggler,
    drain_bound_s,
    estimate_reshard,
    may_pay,
    merge_groups,
)

RECONSIDER_FRACTION = 0.1
"""The decider weighs the merges at most once per this fraction of ``ReshardConfig.restart_s``
of rollout time: sooner, a trajectory's predicted saving moves by less than a tenth of the
switch's cost, too little to cross the margin, and each weighing costs time per trajectory."""


DEFAULT_ENGINE_RESTART_S = 30.0
"""A re-shard's engine switch, weights aside: SGLang's processes stopped, then the merged server's
process start and imports (~10 s), NCCL set-up of its TP group (~5 s) and CUDA graph capture
(~15 s) for a model whose files are in the page cache. Assumption: not measured on this project's
GPUs yet; docs/benchmarks.md ("Tail re-sharding") reports how the gain moves at 10 / 30 / 90 s."""


@dataclass(frozen=True, slots=True)
class ReshardConfig:
    restart_s: float = DEFAULT_ENGINE_RESTART_S
    """Seconds to stop the members' engines and start the merged one, weights aside
    (``DEFAULT_ENGINE_RESTART_S``); the simulator charges its ``SimConfig.engine_restart_s``,
    a live control plane assumes ``heddle up --engine-restart-s``."""
    margin: float = RESHARD_MARGIN
    """The saving must exceed the switch's cost by this fraction of it."""


@dataclass(slots=True)
class _Reshard:
    request: ReshardRequested
    retiring: set[str]
    """Members whose ``WorkerRetired`` is still to come."""
    commanded: bool = False
    """The leader has its ``Reshard``."""


@dataclass(frozen=True, slots=True)
class _Choice:
    members: list[str]
    tp_degree: int
    estimate: ReshardEstimate
    num_trajectories: int


class ReshardDecider:
    name = "reshard"
    handles: frozenset[type[Event]] = frozenset(
        {
            WorkerRegistered,
            WorkerFailed,
            WorkerRetired,
            RolloutSubmitted,
            TrajectorySubmitted,
            TrajectoryPlaced,
            Predicted,
            Generated,
            GenerationInterrupted,
            ToolCalled,
            ToolReturned,
            MigrationRequested,
            Migrated,
            Completed,
            Failed,
        }
    )

    def __init__(
        self,
        cost_for_tp: Callable[[int], CostModel],
        weight_load_s_for_tp: Callable[[int], float],
        config: ReshardConfig = ReshardConfig(),
    ) -> None:
        self._cost_for_tp = cost_for_tp
        self._weight_load_s_for_tp = weight_load_s_for_tp
        self._config = config
        self._view = ReshardView()
        self._reshards: dict[str, _Reshard] = {}
        """In progress, by leader."""
        self.num_reshards = 0
        self._next_weighing_s = float("-inf")

    def decide(self, event: Event) -> list[Output]:
        view = self._view
        match event:
            case WorkerRegistered():
                view.registered(event)
                reshard = self._reshards.get(event.worker_id)
                if reshard is not None and reshard.commanded:
                    del self._reshards[event.worker_id]  # the leader is back: done
            case WorkerFailed():
                view.left(event.worker_id)
                self._abandon(event.worker_id)
            case WorkerRetired():
                view.left(event.worker_id)
                return self._retired(event)
            case RolloutSubmitted():
                view.rollout_submitted(event)
            case TrajectorySubmitted():
                view.submitted(event)
            case TrajectoryPlaced():
                view.placed(event)
            case Predicted():
                view.predicted(event)
            case Generated() | GenerationInterrupted():
                view.generated(event)
            case ToolCalled():
                view.tool_called(event)
            case ToolReturned():
                view.tool_returned(event)
            case MigrationRequested():
                view.migration_requested(event)
            case Migrated():
                view.migrated(event)
            case Completed() | Failed() if not isinstance(event, Failed) or event.is_final:
                view.finished(event)
        if event.rollout_id and event.occurred_at >= self._next_weighing_s:
            interval_s = RECONSIDER_FRACTION * self._config.restart_s / view.time_scale
            self._next_weighing_s = event.occurred_at + interval_s
            return self._consider(event.occurred_at)
        return []

    def snapshot(self) -> object:
        """The state, as a comparable value (replay tests)."""
        view = self._view
        reshards = {
            k: (r.request, frozenset(r.retiring), r.commanded) for k, r in self._reshards.items()
        }
        return (
            dict(view.workers),
            {k: (s.worker_id, s.context_tokens, s.remaining_tokens, s.generating_since)
             for k, s in view.trajectories.items()},
            frozenset(view.waiting),
            dict(view.migrating),
            reshards,
            self._next_weighing_s,
            dict(view.time_scales),
        )  # fmt: skip

    # ---- deciding --------------------------------------------------------------------------

    def _consider(self, now: float) -> list[Output]:
        """Start the re-shards that pay now, one per node at most."""
        view = self._view
        if view.waiting or not view.workers:
            return []
        stragglers = view.stragglers_by_worker(now, self._cost_for_tp)
        busy = {m for r in self._reshards.values() for m in r.request.member_worker_ids}
        by_node: dict[str, list[WorkerSlot]] = {}
        for worker in view.workers.values():
            if worker.can_merge and worker.worker_id not in busy:
                by_node.setdefault(worker.node, []).append(worker)
        outputs: list[Output] = []
        for node in sorted(by_node):
            choice = self._best_merge(by_node[node], stragglers)
            if choice is not None and not view.is_moving(choice.members):
                outputs += self._start(node, choice, now)
        return outputs

    def _best_merge(
        self, workers: list[WorkerSlot], stragglers: dict[str, list[Straggler]]
    ) -> _Choice | None:
        finishes = {
            w.worker_id: drain_bound_s(self._cost_for_tp(w.tp_degree), stragglers[w.worker_id])
            for w in workers
        }
        ordered = sorted(workers, key=lambda w: (-finishes[w.worker_id], w.worker_id))
        if not ordered or not stragglers[ordered[0].worker_id]:
            return None
        slots = {w.worker_id: w for w in workers}
        best: _Choice | None = None
        for members, degree in merge_groups(
            [(w.worker_id, w.tp_degree) for w in ordered], TP_DEGREES
        ):
            group = [
                Member(m, self._cost_for_tp(slots[m].tp_degree), tuple(stragglers[m]))
                for m in members
            ]
            merged = self._cost_for_tp(degree)
            restart_s, margin = self._config.restart_s, self._config.margin
            load_s = self._weight_load_s_for_tp(degree)
            if not may_pay(group, merged, restart_s=restart_s, weight_load_s=load_s, margin=margin):
                continue
            estimate = estimate_reshard(group, merged, restart_s=restart_s, weight_load_s=load_s)
            if not estimate.pays(margin):
                continue
            if best is None or estimate.saving_s > best.estimate.saving_s:
                count = sum(len(stragglers[m]) for m in members)
                best = _Choice(members, degree, estimate, count)
        return best

    def _start(self, node: str, choice: _Choice, now: float) -> list[Output]:
        leader, others = choice.members[0], choice.members[1:]
        self.num_reshards += 1
        reshard_id = derive_id("reshard", leader, self.num_reshards)
        gpu_ids = sorted(g for m in choice.members for g in self._view.workers[m].gpu_ids)
        estimate = choice.estimate
        request = ReshardRequested(
            event_id=derive_id(reshard_id, "requested"),
            occurred_at=now,
            worker_id=leader,
            reshard_id=reshard_id,
            member_worker_ids=list(choice.members),
            node=node,
            tp_degree=choice.tp_degree,
            gpu_ids=gpu_ids,
            num_trajectories=choice.num_trajectories,
            predicted_current_s=estimate.current_s,
            predicted_resharded_s=estimate.resharded_s,
            switch_cost_s=estimate.switch.total_s,
        )
        self._reshards[leader] = _Reshard(request, set(others))
        retire = [
            Retire(
                command_id=derive_id(reshard_id, member, "retire"),
                issued_at=now,
                worker_id=member,
                reshard_id=reshard_id,
                successor_worker_id=leader,
            )
            for member in others
        ]
        return [request, *retire]

    # ---- progress --------------------------------------------------------------------------

    def _retired(self, event: WorkerRetired) -> list[Output]:
        reshard = self._reshards.get(event.successor_worker_id)
        if reshard is None or event.reshard_id != reshard.request.reshard_id:
            return []
        reshard.retiring.discard(event.worker_id)
        if reshard.retiring or reshard.commanded:
            return []
        reshard.commanded = True
        request = reshard.request
        return [
            Reshard(
                command_id=derive_id(request.reshard_id, "reshard"),
                issued_at=event.occurred_at,
                worker_id=request.worker_id,
                reshard_id=request.reshard_id,
                tp_degree=request.tp_degree,
                gpu_ids=list(request.gpu_ids),
            )
        ]

    def _abandon(self, worker_id: str) -> None:
        """A failed member or leader ends its re-shard (see the module docstring)."""
        for leader, reshard in list(self._reshards.items()):
            if worker_id in reshard.request.member_worker_ids:
                del self._reshards[leader]
