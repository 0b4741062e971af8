"""The live control plane's deciders: one bundle per policy in use, each event routed to the
bundle of its rollout.

Rollouts run under the bundle named by their ``RolloutSubmitted.policy``. The router builds that
bundle on the first rollout of its policy, with ``build_bundle`` and the run's options:
the object graph the simulator drives (``heddle.sim.Simulator``), built fresh by each router, so
a restarted control plane rebuilds its deciders from the stream and reuses none. Worker events
concern every bundle: each gets them, and a bundle built later first folds the worker events
seen so far, so it knows the same workers as the others. Events of a rollout whose submission
the router never saw are skipped (counted): they belong to a rollout submitted before this
control plane first started, or one whose policy was refused (``UnknownPolicy``: the host
dead-letters the submission with the reason).

A live control plane decides a batch in stages so that the router's commands go out before
the slower deciders of the same batch decide (``heddle.controlplane.host``): ``BundleRouter.stages``
splits each bundle's deciders by name, in bundle order (``first``, then the others). Each stage
sees every event the router handles, in stream order, and gates its own outputs
(``heddle.control.output_gate``): a stage emits exactly what its deciders would emit in the whole
bundle, the simulator's. ``hooks`` (the live predictor's shell
work, ``heddle.controlplane.live_predictor.PredictionHooks``) run around each event of the stage
holding the prediction decider.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from heddle.control.bundle import ControlOptions, DeciderBundle, build_bundle
from heddle.control.decider import Decider, Output
from heddle.control.output_gate import GatedDeciders, OutputGate
from heddle.control.placement import PlacementDecider
from heddle.control.prediction import PredictionDecider
from heddle.control.priority import PriorityDecider
from heddle.control.reshard import ReshardDecider
from heddle.control.rollout import RolloutDecider
from heddle.control.systems import SYSTEMS, system_spec
from heddle.control.transfer import TransferDecider
from heddle.events import Event, RolloutSubmitted, WorkerEvent

DECIDER_HANDLES: dict[str, frozenset[type[Event]]] = {
    decider.name: decider.handles
    for decider in (
        PredictionDecider,
        ReshardDecider,
        PlacementDecider,
        PriorityDecider,
        TransferDecider,
        RolloutDecider,
    )
}
"""Name -> the event types of each decider a bundle may hold (class attributes)."""
ROUTED: frozenset[type[Event]] = frozenset(
    {RolloutSubmitted}.union(OutputGate.handles, *DECIDER_HANDLES.values())
)
"""What every stage folds: its deciders' events, rollouts' submissions and the gate's ends."""
PLACEMENT = PlacementDecider.name
"""The decider whose commands start, continue and move trajectories (the latency-critical one)."""


class UnknownPolicy(ValueError):
    """A rollout names a system bundle that does not exist."""


class RouterHooks(Protocol):
    """Shell work around each event of the stage holding the prediction decider."""

    def before(self, event: Event) -> None: ...

    def after(self, event: Event) -> None: ...


class BundleRouter:
    """One bundle per policy in use; ``stages`` decide its events (module doc)."""

    def __init__(
        self,
        options: ControlOptions,
        *,
        first: Collection[str] = (),
        hooks: RouterHooks | None = None,
    ) -> None:
        unknown = set(first) - set(DECIDER_HANDLES)
        if unknown:
            raise ValueError(f"no decider named {sorted(unknown)}; have {list(DECIDER_HANDLES)}")
        self._options = options
        self.bundles: dict[str, DeciderBundle] = {}
        """Policy -> its bundle, in the order of first use."""
        self._policy_of: dict[str, str] = {}
        later = [name for name in DECIDER_HANDLES if name not in first]
        groups = [group for group in (list(first), later) if group]
        self.stages = [
            RouterStage(self, group, hooks if PredictionDecider.name in group else None)
            for group in groups
        ]

    @property
    def policies(self) -> list[str]:
        return list(self.bundles)

    @property
    def rollouts_seen(self) -> frozenset[str]:
        """Rollouts whose submission the router has folded in."""
        return frozenset(self._policy_of)

    @property
    def num_skipped(self) -> int:
        """Events of rollouts the router does not know (every stage sees the same)."""
        return self.stages[0].num_skipped

    def policy_of(self, event: Event) -> str | None:
        """The policy of the event's rollout (None: unknown); a submission adopts its rollout.
        Raises ``UnknownPolicy`` for a submission naming no bundle."""
        if isinstance(event, RolloutSubmitted):
            if event.policy not in SYSTEMS:
                raise UnknownPolicy(
                    f"rollout {event.rollout_id} names unknown policy {event.policy!r}; "
                    f"choose one of {', '.join(SYSTEMS)}"
                )
            self._policy_of.setdefault(event.rollout_id, event.policy)
        return self._policy_of.get(event.rollout_id)

    def bundle(self, policy: str) -> DeciderBundle:
        """The bundle of ``policy``, built on first use."""
        bundle = self.bundles.get(policy)
        if bundle is None:
            bundle = self.bundles[policy] = build_bundle(system_spec(policy), self._options)
            names = {decider.name for decider in bundle.deciders}
            if not names <= set(DECIDER_HANDLES):
                raise ValueError(f"bundle {policy!r} holds deciders the router does not route")
        return bundle


class RouterStage:
    """The deciders of some names in every bundle in use, each bundle's behind its own gate."""

    handles = ROUTED

    def __init__(self, router: BundleRouter, names: list[str], hooks: RouterHooks | None) -> None:
        self.names = frozenset(names)
        self.slot = "+".join(names)
        """The stage's name (``heddle status``): its deciders' names."""
        self._router = router
        self._hooks = hooks
        self._parts: dict[str, GatedDeciders] = {}
        self._worker_events: list[Event] = []
        self.num_skipped = 0

    def decider(self, policy: str, name: str) -> Decider | None:
        """The decider ``name`` of the bundle of ``policy`` in this stage (None: none)."""
        part = self._parts.get(policy)
        return next((d for d in part.deciders if d.name == name), None) if part else None

    def decide(self, event: Event) -> list[Output]:
        """Fold ``event`` into the bundle(s) it concerns; their outputs in order."""
        if self._hooks is None:
            return self._route(event)
        self._hooks.before(event)
        try:
            return self._route(event)
        finally:
            self._hooks.after(event)

    def _route(self, event: Event) -> list[Output]:
        if isinstance(event, WorkerEvent):
            self._worker_events.append(event)
            return [output for part in self._parts.values() for output in part.decide(event)]
        policy = self._router.policy_of(event)
        if policy is None:
            if not isinstance(event, (RolloutSubmitted, *OutputGate.handles)):
                self.num_skipped += 1
            return []
        return self._part(policy).decide(event)

    def _part(self, policy: str) -> GatedDeciders:
        part = self._parts.get(policy)
        if part is None:
            part = self._parts[policy] = self._router.bundle(policy).gated(self.names)
            for worker_event in self._worker_events:
                part.decide(worker_event)  # outputs were published by the other bundles
        return part
