"""What the re-shard decider knows, folded from the stream: the live workers (node, GPUs, TP
degree), each trajectory's worker, context, latest prediction and whether it is generating, the
trajectories still waiting for admission, and the migrations requested but not landed.

A trajectory's remaining output is its latest prediction less what it generated since
(``Generated``, ``GenerationInterrupted``); while a step generates, what it produced so far is not
in the stream, so it is estimated from the seconds since the step started at its worker's step
time (``CostModel.decode_step_s`` at the worker's generating batch). It is capped at the room
its context has left (``TrajectorySpec.max_total_tokens``): the engine ends a trajectory there,
and a prediction past it is an error that favours the merge, since attention over a long
context is where a higher degree gains most. The online predictor, cold on a search agent's
tail, predicted 231,310 remaining tokens for a trajectory of 19,000 at its 26th step (it had
about 30,000 left): four Qwen3-8B TP2 workers merged into TP8 then looked 15% faster, and 5%
slower with every context capped at 131,072; the re-shards taken cost that rollout 8-17%
(docs/benchmarks.md, "Tail re-sharding"). Events are stamped in wall time and the cost model
counts model seconds: a rollout's ``time_scale`` (``RolloutSubmitted``) converts one into the
other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from heddle.control.placement.admission import Key
from heddle.events import (
    Completed,
    Failed,
    Generated,
    GenerationInterrupted,
    Migrated,
    MigrationRequested,
    Predicted,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectoryPlaced,
    TrajectorySubmitted,
    WorkerRegistered,
)
from heddle.policy.cost.model import CostModel
from heddle.policy.resources.reshard import Straggler


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """A live worker: where its engine runs and at which degree."""

    worker_id: str
    node: str
    gpu_ids: tuple[int, ...]
    tp_degree: int
    incarnation: str = ""

    @property
    def can_merge(self) -> bool:
        """Whether it says where it runs (a worker that does not is never re-sharded)."""
        return bool(self.node) and len(self.gpu_ids) == self.tp_degree


@dataclass(slots=True)
class TrajectorySlot:
    worker_id: str = ""
    context_tokens: int = 0
    remaining_tokens: float = 0.0
    """The latest prediction, less what was generated since."""
    remaining_tool_s: float = 0.0
    max_total_tokens: int = 0
    """Its context's cap (0: unknown, no cap)."""
    generating_since: float | None = None
    """When its current step began generating (None: in a tool call, or not running)."""
    time_scale: float = 1.0
    """Model seconds per wall second of its rollout."""


@dataclass(slots=True)
class ReshardView:
    workers: dict[str, WorkerSlot] = field(default_factory=dict)
    trajectories: dict[Key, TrajectorySlot] = field(default_factory=dict)
    waiting: set[Key] = field(default_factory=set)
    """Submitted, not yet placed: admission still holds them, so the cluster is not draining."""
    migrating: dict[Key, tuple[str, str]] = field(default_factory=dict)
    """Requested migrations not yet landed: (source, target)."""
    time_scales: dict[str, float] = field(default_factory=dict)
    """Per rollout, model seconds per wall second."""

    @property
    def time_scale(self) -> float:
        """The fastest rollout's: the shortest wall time a model second takes."""
        return max(self.time_scales.values(), default=1.0)

    def rollout_submitted(self, event: RolloutSubmitted) -> None:
        self.time_scales[event.rollout_id] = event.time_scale if event.time_scale > 0 else 1.0

    # ---- workers -------------------------------------------------------------------------

    def registered(self, event: WorkerRegistered) -> None:
        self.workers[event.worker_id] = WorkerSlot(
            event.worker_id,
            event.node,
            tuple(sorted(event.gpu_ids)),
            event.tp_degree,
            event.incarnation,
        )
        for slot in self.trajectories.values():  # a relaunched worker resumes its steps
            if slot.worker_id == event.worker_id and slot.generating_since is not None:
                slot.generating_since = event.occurred_at

    def left(self, worker_id: str) -> None:
        """The worker failed or retired (its trajectories are placed elsewhere next)."""
        self.workers.pop(worker_id, None)

    # ---- trajectories --------------------------------------------------------------------

    def submitted(self, event: TrajectorySubmitted) -> None:
        key = (event.rollout_id, event.traj_id)
        if key not in self.trajectories:
            self.waiting.add(key)
            self.trajectories[key] = TrajectorySlot(
                context_tokens=len(event.spec.prompt_token_ids),
                max_total_tokens=event.spec.max_total_tokens,
            )

    def placed(self, event: TrajectoryPlaced) -> None:
        key = (event.rollout_id, event.traj_id)
        slot = self.trajectories.setdefault(key, TrajectorySlot())
        self.waiting.discard(key)
        slot.worker_id = event.worker_id
        if event.reason != "reshard" or slot.generating_since is not None:
            slot.generating_since = event.occurred_at

    def predicted(self, event: Predicted) -> None:
        slot = self.trajectories.get((event.rollout_id, event.traj_id))
        if slot is not None:
            slot.remaining_tokens = max(0.0, event.predicted_remaining_tokens)
            slot.remaining_tool_s = max(0.0, event.predicted_remaining_tool_s)

    def generated(self, event: Generated | GenerationInterrupted) -> None:
        slot = self.trajectories.get((event.rollout_id, event.traj_id))
        if slot is None:
            return
        num_tokens = len(event.output_token_ids)
        slot.context_tokens += num_tokens
        slot.remaining_tokens = max(0.0, slot.remaining_tokens - num_tokens)
        if isinstance(event, Generated):
            slot.generating_since = None

    def tool_called(self, event: ToolCalled) -> None:
        slot = self.trajectories.get((event.rollout_id, event.traj_id))
        if slot is not None:
            slot.generating_since = None

    def tool_returned(self, event: ToolReturned) -> None:
        slot = self.trajectories.get((event.rollout_id, event.traj_id))
        if slot is not None:
            slot.context_tokens += len(event.output_token_ids)
            slot.generating_since = event.occurred_at

    def migration_requested(self, event: MigrationRequested) -> None:
        key = (event.rollout_id, event.traj_id)
        self.migrating[key] = (event.source_worker_id, event.target_worker_id)

    def migrated(self, event: Migrated) -> None:
        key = (event.rollout_id, event.traj_id)
        self.migrating.pop(key, None)
        slot = self.trajectories.get(key)
        if slot is not None:
            slot.worker_id = event.target_worker_id

    def finished(self, event: Completed | Failed) -> None:
        key = (event.rollout_id, event.traj_id)
        self.trajectories.pop(key, None)
        self.waiting.discard(key)
        self.migrating.pop(key, None)

    # ---- queries -------------------------------------------------------------------------

    def is_moving(self, worker_ids: Iterable[str]) -> bool:
        """Whether a requested migration leaves or targets one of ``worker_ids``."""
        ids = set(worker_ids)
        return any(source in ids or target in ids for source, target in self.migrating.values())

    def stragglers_by_worker(
        self, now: float, cost_for_tp: Callable[[int], CostModel]
    ) -> dict[str, list[Straggler]]:
        """Each live worker's trajectories as the estimate sees them at ``now``."""
        hosted: dict[str, list[TrajectorySlot]] = {worker_id: [] for worker_id in self.workers}
        for slot in self.trajectories.values():
            if slot.worker_id in hosted:
                hosted[slot.worker_id].append(slot)
        return {
            worker_id: _stragglers(slots, now, cost_for_tp(self.workers[worker_id].tp_degree))
            for worker_id, slots in hosted.items()
        }


def _stragglers(slots: list[TrajectorySlot], now: float, cost: CostModel) -> list[Straggler]:
    generating = [slot for slot in slots if slot.generating_since is not None]
    step_s = 0.0
    if generating:
        context = sum(slot.context_tokens for slot in generating)
        step_s = cost.decode_step_s(len(generating), context)
    return [Straggler(_remaining_now(slot, now, step_s), slot.context_tokens, slot.remaining_tool_s)
            for slot in slots]  # fmt: skip


def _remaining_now(slot: TrajectorySlot, now: float, step_s: float) -> float:
    """Its remaining output at ``now``, at most the room its context has left."""
    remaining = slot.remaining_tokens
    if slot.generating_since is not None and step_s > 0:
        produced = max(0.0, now - slot.generating_since) * slot.time_scale / step_s
        remaining = max(0.0, remaining - produced)
    if slot.max_total_tokens > 0:
        remaining = min(remaining, max(0.0, slot.max_total_tokens - slot.context_tokens))
    return remaining
