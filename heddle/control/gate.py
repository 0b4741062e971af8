"""The event gate: whether a stored event is a fact Heddle acts on, or a forgery, a stale
writer's or a mistake to dead-letter with the reason.

JetStream stores whatever a credential may publish; decoding checks only the shape. Before
the deciders see an event, and before the ledger projects it, ``EventGate.admit`` checks
what it says against what came before it in the stream (pure: one verdict per event, the same
wherever the stream is read in order):

- its schema ``version`` is one Heddle reads, and no count, step or duration is negative;
- a rollout is submitted once, with at least one trajectory and a known policy; its end
  (``finished`` once all its trajectory slots ended, or ``cancelled``) comes once;
- a trajectory is submitted once, into a known rollout that has not ended, within the
  rollout's number of trajectories (or as a resubmission its stale predecessor announced);
- a trajectory whose submission the control plane dead-lettered (a ``DeadLettered`` of role
  ``control_plane`` naming its ``submitted`` subject, in a known rollout that has not ended,
  before any submission of it was accepted) takes its slot as submitted-then-failed: the
  control plane's final ``Failed`` naming no worker ends it (``heddle.control.rollout``), so
  the rollout still ends and the trainer gets the failure; no other event may claim that slot.
  Another role's dead letter (``heddle.evt.deadletter.<role>``, which only that role may
  publish) changes nothing;
- every other event of a trajectory names a submitted one, and passes its lease
  (``heddle.control.leases``): the worker and hosting that hold it, its next step, not after
  its end; a failure naming no worker only after an abort request while no worker holds it.

Operator events pass (the operations service checks them and records who asked; an abort
request lets the control plane fail the trajectory while no worker holds it); so do worker,
weights and tool-executor events, whose checks are the decoder's.

A refused event changes no state: not the deciders', the ledger's or a trainer's. The verdict of
an accepted event that ends a trajectory slot, or the rollout, names the trainer that owns the
rollout (``RolloutSubmitted.trainer``): the control plane delivers that record to the trainer's
stream.

The leases live in a ``LeaseStore``: the control plane keeps them in memory (``MemoryLeases``,
rebuilt by replaying the stream), the ledger in its rows (``heddle.ledger``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Protocol

import msgspec

from heddle.control.leases import DECISIONS, Refusal, TrajectoryLease, admit
from heddle.control.systems import SYSTEMS
from heddle.events import (
    OPERATOR_EVENTS,
    SCHEMA_VERSION,
    Completed,
    DeadLettered,
    Event,
    Failed,
    Predicted,
    RolloutCancelled,
    RolloutFinished,
    RolloutSubmitted,
    TrajectoryAbortRequested,
    TrajectoryEvent,
    TrajectorySpec,
    TrajectorySubmitted,
)
from heddle.events.rollout import DEFAULT_TRAINER
from heddle.events.subjects import refused_submission
from heddle.ids import check_token


class RolloutLease(msgspec.Struct, kw_only=True):
    """What the gate knows of one submitted rollout (mutable)."""

    num_trajectories: int
    trainer: str = DEFAULT_TRAINER
    num_submitted: int = 0
    """Trajectories submitted by the trainer (resubmissions not counted)."""
    num_refused: int = 0
    """Trajectory slots whose submission was dead-lettered (never submitted), each ended by
    the control plane's ``Failed`` (``heddle.control.rollout``)."""
    refused: list[str] = []
    """Trajectories whose submission was dead-lettered and whose ``Failed`` has not come."""
    num_open: int = 0
    """Trajectories submitted and not ended."""
    num_slots_ended: int = 0
    """Trajectory slots that ended (completed, or failed for good)."""
    is_ended: bool = False
    awaited: list[str] = []
    """Resubmissions announced by a stale trajectory's ``Failed``, not yet submitted."""


ENDED = TrajectoryLease(is_ended=True)
"""The lease every ended trajectory keeps (what ended it no longer matters; never mutated:
``admit`` refuses on an ended lease before changing anything)."""


class LeaseStore(Protocol):
    """Where the gate keeps its leases; what ``admit`` changes is saved back."""

    def rollout(self, rollout_id: str) -> RolloutLease | None: ...

    def trajectory(self, rollout_id: str, traj_id: str) -> TrajectoryLease | None: ...

    def save_rollout(self, rollout_id: str, lease: RolloutLease) -> None: ...

    def save_trajectory(self, rollout_id: str, traj_id: str, lease: TrajectoryLease) -> None: ...


class MemoryLeases:
    """Leases in dictionaries (the control plane's)."""

    def __init__(self) -> None:
        self.rollouts: dict[str, RolloutLease] = {}
        self.trajectories: dict[tuple[str, str], TrajectoryLease] = {}

    def rollout(self, rollout_id: str) -> RolloutLease | None:
        return self.rollouts.get(rollout_id)

    def trajectory(self, rollout_id: str, traj_id: str) -> TrajectoryLease | None:
        return self.trajectories.get((rollout_id, traj_id))

    def save_rollout(self, rollout_id: str, lease: RolloutLease) -> None:
        self.rollouts[rollout_id] = lease

    def save_trajectory(self, rollout_id: str, traj_id: str, lease: TrajectoryLease) -> None:
        self.trajectories[(rollout_id, traj_id)] = lease


@dataclass(frozen=True, slots=True)
class Verdict:
    refusal: Refusal | None = None
    deliver_to: str = ""
    """The trainer whose stream gets this event: it ended a trajectory slot or the rollout
    ("" otherwise)."""

    @property
    def is_accepted(self) -> bool:
        return self.refusal is None


ACCEPTED = Verdict()


def refused(reason: str) -> Verdict:
    return Verdict(Refusal(reason))


class EventGate:
    def __init__(self, store: LeaseStore | None = None) -> None:
        self.store: LeaseStore = store if store is not None else MemoryLeases()

    def admit(self, event: Event) -> Verdict:
        """Fold ``event`` into the leases if it is accepted; the verdict either way."""
        problem = malformed(event)
        if problem is not None:
            return refused(problem)
        if isinstance(event, TrajectoryAbortRequested):
            self._abort_requested(event)
        if isinstance(event, OPERATOR_EVENTS):
            return ACCEPTED  # checked by the operations service, which records who asked
        match event:
            case RolloutSubmitted():
                return self._rollout_submitted(event)
            case RolloutFinished() | RolloutCancelled():
                return self._rollout_ended(event)
            case TrajectorySubmitted():
                return self._trajectory_submitted(event)
            case TrajectoryEvent():
                return self._trajectory_event(event)
            case DeadLettered():
                self._dead_lettered(event)
        return ACCEPTED

    def _rollout_submitted(self, event: RolloutSubmitted) -> Verdict:
        if self.store.rollout(event.rollout_id) is not None:
            return refused(f"rollout {event.rollout_id} was submitted already")
        problem = _rollout_problem(event)
        if problem is not None:
            return refused(problem)
        owner = event.trainer or DEFAULT_TRAINER
        lease = RolloutLease(num_trajectories=event.num_trajectories, trainer=owner)
        self.store.save_rollout(event.rollout_id, lease)
        return ACCEPTED

    def _rollout_ended(self, event: RolloutFinished | RolloutCancelled) -> Verdict:
        rollout = self.store.rollout(event.rollout_id)
        if rollout is None:
            return refused(f"unknown rollout {event.rollout_id}")
        if rollout.is_ended:
            return refused(f"rollout {event.rollout_id} ended already")
        is_early = rollout.num_slots_ended < rollout.num_trajectories
        if isinstance(event, RolloutFinished) and is_early:
            return refused(
                f"rollout {event.rollout_id} cannot finish: {rollout.num_slots_ended} of its "
                f"{rollout.num_trajectories} trajectories ended"
            )
        rollout.is_ended = True
        self.store.save_rollout(event.rollout_id, rollout)
        return Verdict(deliver_to=rollout.trainer)

    def _trajectory_submitted(self, event: TrajectorySubmitted) -> Verdict:
        rollout = self.store.rollout(event.rollout_id)
        if rollout is None:
            return refused(f"unknown rollout {event.rollout_id}")
        if rollout.is_ended:
            return refused(f"rollout {event.rollout_id} ended already")
        if self.store.trajectory(event.rollout_id, event.traj_id) is not None:
            return refused(f"trajectory {event.traj_id} was submitted already")
        problem = _spec_problem(event.spec) or _slot_problem(rollout, event)
        if problem is not None:
            return refused(problem)
        if event.spec.attempt == 0:
            rollout.num_submitted += 1
        else:
            rollout.awaited.remove(event.traj_id)
        rollout.num_open += 1
        self.store.save_rollout(event.rollout_id, rollout)
        self.store.save_trajectory(event.rollout_id, event.traj_id, TrajectoryLease.of(event.spec))
        return ACCEPTED

    def _abort_requested(self, event: TrajectoryAbortRequested) -> None:
        """The control plane may now end the trajectory with a failure naming no worker, should
        no worker hold it (``heddle.control.operations``)."""
        lease = self.store.trajectory(event.rollout_id, event.traj_id)
        if lease is None or lease.is_ended or lease.may_fail_unplaced:
            return
        lease.may_fail_unplaced = True
        self.store.save_trajectory(event.rollout_id, event.traj_id, lease)

    def _dead_lettered(self, event: DeadLettered) -> None:
        """A submission the control plane dead-lettered takes its slot, to be ended by the
        control plane's ``Failed`` (a dead letter of another role, of anything else, or of a
        submission that was read, changes nothing)."""
        refused_ids = refused_submission(event)
        if refused_ids is None:
            return
        rollout_id, traj_id = refused_ids
        rollout = self.store.rollout(rollout_id)
        if rollout is None or rollout.is_ended or traj_id in rollout.refused:
            return
        if self.store.trajectory(rollout_id, traj_id) is not None:
            return
        if rollout.num_submitted + rollout.num_refused >= rollout.num_trajectories:
            return
        rollout.num_refused += 1
        rollout.refused.append(traj_id)
        self.store.save_rollout(rollout_id, rollout)

    def _trajectory_event(self, event: TrajectoryEvent) -> Verdict:
        rollout = self.store.rollout(event.rollout_id)
        if rollout is None:
            return refused(f"unknown rollout {event.rollout_id}")
        lease = self.store.trajectory(event.rollout_id, event.traj_id)
        if lease is None and _is_refused_submission(rollout, event):
            rollout.refused.remove(event.traj_id)
            rollout.num_open += 1
            lease = TrajectoryLease(may_fail_unplaced=True)
        if lease is None:
            return refused(f"trajectory {event.traj_id} was never submitted to {event.rollout_id}")
        refusal = admit(lease, event)
        if refusal is not None:
            return Verdict(refusal)
        if isinstance(event, DECISIONS):
            return ACCEPTED
        if not lease.is_ended:
            self.store.save_trajectory(event.rollout_id, event.traj_id, lease)
            return ACCEPTED
        return self._ended(rollout, event)

    def _ended(self, rollout: RolloutLease, event: TrajectoryEvent) -> Verdict:
        """A trajectory just ended: its slot too, unless it runs afresh under another id."""
        self.store.save_trajectory(event.rollout_id, event.traj_id, ENDED)
        rollout.num_open -= 1
        deliver_to = ""
        if isinstance(event, Failed) and event.resubmitted_as:
            rollout.awaited.append(event.resubmitted_as)
        elif isinstance(event, Completed | Failed):
            rollout.num_slots_ended += 1
            deliver_to = rollout.trainer
        self.store.save_rollout(event.rollout_id, rollout)
        return Verdict(deliver_to=deliver_to)


def _is_refused_submission(rollout: RolloutLease, event: TrajectoryEvent) -> bool:
    """Whether ``event`` is the control plane's final ``Failed`` (no worker, not retried) of a
    trajectory whose submission was dead-lettered."""
    if not isinstance(event, Failed) or event.worker_id or not event.is_final:
        return False
    return event.traj_id in rollout.refused and not rollout.is_ended


def malformed(event: Event) -> str | None:
    """What makes ``event`` unreadable whatever came before it: a schema version Heddle does
    not read, a negative (or NaN) count, step, hosting or duration."""
    if not 1 <= event.version <= SCHEMA_VERSION:
        return f"schema version {event.version} is not one Heddle reads (1..{SCHEMA_VERSION})"
    cls = type(event)
    for name in _numbers(cls):
        value = getattr(event, name)
        floor = -1 if name == "step" and cls is Predicted else 0
        if isinstance(value, int | float) and not value >= floor:
            return f"{name} {value} is negative"
    return None


@functools.cache
def _numbers(cls: type[msgspec.Struct]) -> tuple[str, ...]:
    """The fields of ``cls`` that count, number or time something (never negative)."""
    names = ("step", "epoch", "target_epoch", "index", "sequence")
    return tuple(
        field.name
        for field in msgspec.structs.fields(cls)
        if field.name in names or field.name.startswith("num_") or field.name.endswith("_s")
    )


def _rollout_problem(event: RolloutSubmitted) -> str | None:
    if event.num_trajectories < 1:
        return f"rollout {event.rollout_id} has {event.num_trajectories} trajectories"
    if event.policy not in SYSTEMS:
        return (
            f"rollout {event.rollout_id} names unknown policy {event.policy!r}; "
            f"choose one of {', '.join(SYSTEMS)}"
        )
    if not (event.time_scale > 0 and math.isfinite(event.time_scale)):
        return f"rollout {event.rollout_id} has time scale {event.time_scale}"
    if event.trainer:
        try:
            check_token(event.trainer, "trainer name")
        except ValueError as exc:
            return str(exc)
    return None


def _spec_problem(spec: TrajectorySpec) -> str | None:
    limits = {
        "max_steps": spec.max_steps,
        "max_new_tokens": spec.max_new_tokens,
        "max_total_tokens": spec.max_total_tokens,
        "max_attempts": spec.max_attempts,
    }
    for name, value in limits.items():
        if value < 1:
            return f"spec {name} {value} is below 1"
    if spec.max_response_tokens is not None and spec.max_response_tokens < 1:
        return f"spec max_response_tokens {spec.max_response_tokens} is below 1"
    if spec.index < 0 or spec.attempt < 0 or spec.attempt >= spec.max_attempts:
        return f"spec index {spec.index}, attempt {spec.attempt} of {spec.max_attempts}"
    return None


def _slot_problem(rollout: RolloutLease, event: TrajectorySubmitted) -> str | None:
    """Whether the submission fits a slot of the rollout (or is an awaited resubmission)."""
    spec = event.spec
    if spec.attempt > 0:
        if event.traj_id not in rollout.awaited:
            return f"trajectory {event.traj_id} is no resubmission the rollout awaits"
        return None
    if rollout.num_submitted + rollout.num_refused >= rollout.num_trajectories:
        return f"rollout {event.rollout_id} has all its {rollout.num_trajectories} trajectories"
    if spec.index >= rollout.num_trajectories:
        return f"index {spec.index} lies beyond the rollout's {rollout.num_trajectories}"
    return None
