"""The deciders of one control-plane slot, one instance per system bundle in use.

A slot is one decider role of ``heddle.control`` (prediction, re-shard, priority, placement,
transfer, rollout), hosted by one durable consumer. Rollouts run under the bundle named by their
``RolloutSubmitted.policy``, so the slot keeps one decider per bundle in use (built on the first
rollout of that bundle, from the same ``build_control_plane`` the simulator uses) and routes
each event to the decider of its rollout's bundle. Worker events concern every bundle: each
decider gets them, and a decider built later first replays the worker events seen so far, so it
knows the same workers as the others.

Events of a rollout whose submission this slot never saw are skipped (counted): they belong to a
rollout submitted before this control plane first started, or one whose policy was refused.

A cancelled rollout (``RolloutCancelled``) gets no more commands: its deciders still fold its
events, but worker commands, placements and migration requests they emit for it are dropped
(``heddle.consumers.liveness`` aborts its trajectories on their workers), so an abandoned rollout
never comes back to life on the workers of a later one.

Nothing is emitted about a finished trajectory: once the slot has seen its ``Completed`` (or a
``Failed`` that is not retried), outputs naming it (events of that trajectory, commands for it)
are dropped, whatever a decider computes from a late event (a prediction, a priority update);
once its rollout finished, all outputs naming its trajectories are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from heddle.control import (
    ControlPlane,
    Decider,
    Output,
    PlacementDecider,
    PredictionDecider,
    PriorityDecider,
    RolloutDecider,
    TransferDecider,
)
from heddle.control.reshard import ReshardDecider
from heddle.control.systems import SYSTEMS
from heddle.events import (
    Completed,
    Event,
    Failed,
    MigrationRequested,
    RolloutCancelled,
    RolloutFinished,
    RolloutSubmitted,
    TrajectoryEvent,
    TrajectoryPlaced,
    WorkerCommand,
    WorkerEvent,
)

_OWN = (RolloutSubmitted, RolloutCancelled, RolloutFinished, Completed, Failed)
"""What every slot folds for itself (routing, cancellations, finished trajectories)."""

SLOT_HANDLES: dict[str, frozenset[type[Event]]] = {
    PredictionDecider.name: PredictionDecider.handles,
    ReshardDecider.name: ReshardDecider.handles,
    PriorityDecider.name: PriorityDecider.handles,
    PlacementDecider.name: PlacementDecider.handles,
    TransferDecider.name: TransferDecider.handles,
    RolloutDecider.name: RolloutDecider.handles,
}
"""Slot name -> the event types its decider handles (class attributes of the deciders)."""
SLOTS: tuple[str, ...] = tuple(SLOT_HANDLES)

BundleFactory = Callable[[str], ControlPlane]
"""Builds the control plane of a system bundle by name (``build_control_plane``)."""


class UnknownPolicy(ValueError):
    """A rollout names a system bundle that does not exist."""


class SlotHooks(Protocol):
    """Side work of a slot's shell around each decision (the prediction slot's trace oracle)."""

    def before(self, event: Event) -> None: ...

    def after(self, event: Event) -> None: ...


class SlotDeciders:
    """Routes events to the slot's decider of each rollout's bundle; owned by one consumer."""

    def __init__(
        self, slot: str, make_bundle: BundleFactory, hooks: SlotHooks | None = None
    ) -> None:
        if slot not in SLOT_HANDLES:
            raise ValueError(f"unknown slot {slot!r}; choose one of {', '.join(SLOTS)}")
        self.slot = slot
        self.handles: frozenset[type[Event]] = SLOT_HANDLES[slot] | set(_OWN)
        self._decider_handles = SLOT_HANDLES[slot]
        self._make_bundle = make_bundle
        self._hooks = hooks
        self._by_policy: dict[str, Decider | None] = {}
        self._policy_of: dict[str, str] = {}
        self._worker_events: list[Event] = []
        self._cancelled: set[str] = set()
        self._finished: dict[str, set[str]] = {}
        """Per running rollout, its trajectories that ended (completed or failed for good)."""
        self._ended: set[str] = set()
        """Rollouts that finished: every output naming one of their trajectories is dropped."""
        self.num_skipped = 0
        """Events of rollouts this slot does not know, or of bundles without this slot."""

    @property
    def policies(self) -> list[str]:
        return list(self._by_policy)

    @property
    def rollouts_seen(self) -> frozenset[str]:
        """Rollouts whose submission this slot has folded in."""
        return frozenset(self._policy_of)

    def decider_for(self, policy: str) -> Decider | None:
        """The slot's decider of a bundle in use (None: not in use, or the bundle has none)."""
        return self._by_policy.get(policy)

    def decide(self, event: Event) -> list[Output]:
        """Fold ``event`` into the decider(s) it concerns; their outputs in order. Raises
        ``UnknownPolicy`` for a submission naming no bundle."""
        if self._hooks is not None:
            self._hooks.before(event)
        try:
            return self._route(event)
        finally:
            if self._hooks is not None:
                self._hooks.after(event)

    def _route(self, event: Event) -> list[Output]:
        if isinstance(event, WorkerEvent):
            return self._broadcast(event)
        if isinstance(event, RolloutSubmitted):
            self._adopt(event)
        elif isinstance(event, RolloutCancelled):
            self._cancelled.add(event.rollout_id)
        policy = self._policy_of.get(event.rollout_id)
        decider = self._by_policy.get(policy) if policy is not None else None
        if decider is None or type(event) not in self._decider_handles:
            if not isinstance(event, _OWN):
                self.num_skipped += 1
            outputs: list[Output] = []
        else:
            outputs = self._allowed(decider.decide(event))
        self._note_end(event)
        return outputs

    def _note_end(self, event: Event) -> None:
        """Remember a trajectory's or rollout's end (after deciding: its own outputs stand)."""
        match event:
            case Completed() | Failed() if not getattr(event, "retryable", False):
                if event.rollout_id not in self._ended:
                    self._finished.setdefault(event.rollout_id, set()).add(event.traj_id)
            case RolloutFinished():
                self._finished.pop(event.rollout_id, None)
                self._ended.add(event.rollout_id)

    def _allowed(self, outputs: list[Output]) -> list[Output]:
        """The outputs minus what would set a cancelled rollout's trajectories moving, and
        anything about a finished trajectory."""
        if not (self._cancelled or self._finished or self._ended):
            return outputs
        return [output for output in outputs if self._is_allowed(output)]

    def _is_allowed(self, output: Output) -> bool:
        rollout_id = output.rollout_id
        if rollout_id in self._cancelled and isinstance(
            output, (WorkerCommand, TrajectoryPlaced, MigrationRequested)
        ):
            return False
        if not isinstance(output, (WorkerCommand, TrajectoryEvent)):
            return True
        traj_id = getattr(output, "traj_id", "")
        if not traj_id:
            return True
        return rollout_id not in self._ended and traj_id not in self._finished.get(rollout_id, ())

    def _adopt(self, event: RolloutSubmitted) -> None:
        if event.policy not in SYSTEMS:
            raise UnknownPolicy(
                f"rollout {event.rollout_id} names unknown policy {event.policy!r}; "
                f"choose one of {', '.join(SYSTEMS)}"
            )
        self._policy_of.setdefault(event.rollout_id, event.policy)
        if event.policy not in self._by_policy:
            self._by_policy[event.policy] = self._build(event.policy)

    def _build(self, policy: str) -> Decider | None:
        bundle = self._make_bundle(policy)
        decider = next((d for d in bundle.deciders if d.name == self.slot), None)
        if decider is not None:
            for worker_event in self._worker_events:
                decider.decide(worker_event)  # outputs were published by the older deciders
        return decider

    def _broadcast(self, event: Event) -> list[Output]:
        if type(event) not in self._decider_handles:
            return []
        self._worker_events.append(event)
        outputs: list[Output] = []
        for decider in self._by_policy.values():
            if decider is not None:
                outputs += decider.decide(event)
        return self._allowed(outputs)
