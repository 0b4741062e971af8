"""A trajectory's lease: which worker may write its next events, and which events come next.

``admit(lease, event)`` decides whether one event of a submitted trajectory is a fact of it,
and folds it in when it is. The control plane's gate (``heddle.control.gate``), the ledger
projector and a worker rebuilding a trajectory from the stream fold a trajectory's events
through this one function, in stream order, so they agree on every event.

Hosting. Every placement, re-placement or migration of a trajectory gives it a new hosting
number, its *epoch* (``TrajectoryPlaced.epoch``, ``Migrated.target_epoch``, chosen by the
control plane and growing per trajectory). The worker writes it into every event it publishes
for the trajectory. An event of a worker that no longer holds the trajectory, or of an older
hosting (a worker declared failed that kept running: a *zombie*), is refused, and the refusal
names that worker and epoch so that the control plane can tell it (``Fence``).

Order. A step's events come in order, once each: ``generation_started`` of the next step (the
previous one over: generated, and its tool call, if any, returned), any number of
``generation_interrupted`` (a re-shard stopped its engine; the step goes on where it resumes),
``generated``,
``tool_called``, ``tool_returned`` (answering the call that is out, from any executor). A
terminal event (``completed``, a ``failed`` that is not retried) ends the lease; events after it
are refused, but the control plane's own decisions (``predicted``, ``prioritized``,
``migration_requested``), which may land after the end they did not know of, pass.

Failures. A ``failed`` naming a worker is its holder's, under its hosting. One naming no worker
is the control plane's own, and ends only a trajectory no worker holds that it may end so
(``may_fail_unplaced``: an operator asked to abort it, or its submission was dead-lettered);
any other is refused, so a trajectory submitted but not yet placed is ended by no one else.

Events written before hostings were numbered carry epoch 0: a lease placed under epoch 0 keeps
every other rule, and an event of epoch 0 never outranks a numbered hosting.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from heddle.events import (
    Completed,
    Failed,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    Migrated,
    MigrationRequested,
    Predicted,
    Preempted,
    Prioritized,
    ToolCalled,
    ToolReturned,
    TrajectoryEvent,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
)
from heddle.ids import resubmission_id


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an event is not a fact of its trajectory. ``fenced_worker`` (with ``fenced_epoch``):
    a worker that wrote for a hosting it no longer holds, and should be told so."""

    reason: str
    fenced_worker: str = ""
    fenced_epoch: int = 0


class TrajectoryLease(msgspec.Struct, kw_only=True):
    """What the gate knows of one submitted trajectory (mutable: ``admit`` folds into it)."""

    worker_id: str = ""
    """The holder ("" before placement, or after the holder handed it back retryably)."""
    epoch: int = 0
    """The holder's hosting number."""
    max_epoch: int = 0
    """The highest hosting number granted so far: a newer hosting must exceed it."""
    num_steps: int = 0
    """Steps whose generation started."""
    is_generated: bool = False
    """The last started step has its generation."""
    tool_call_id: str = ""
    """The last step's tool call ("" when it called none)."""
    is_tool_returned: bool = False
    is_ended: bool = False
    attempt: int = 0
    max_attempts: int = 1
    may_fail_unplaced: bool = False
    """The control plane may end it with a ``Failed`` naming no worker while no worker holds
    it: an operator asked to abort it, or its submission was dead-lettered (the gate sets it)."""

    @classmethod
    def of(cls, spec: TrajectorySpec) -> TrajectoryLease:
        """The lease of a trajectory just submitted with ``spec``."""
        return cls(attempt=spec.attempt, max_attempts=spec.max_attempts)

    def host(self, worker_id: str, epoch: int) -> None:
        """``worker_id`` holds the trajectory under hosting ``epoch`` from now on."""
        self.worker_id = worker_id
        self.epoch = epoch
        self.max_epoch = max(self.max_epoch, epoch)

    @property
    def is_step_over(self) -> bool:
        """The last started step generated and, if it called a tool, got the result."""
        return self.is_generated and (not self.tool_call_id or self.is_tool_returned)


DECISIONS = (Predicted, Prioritized, MigrationRequested)
"""The control plane's own decisions about a trajectory: they pass once it is submitted."""


def admit(lease: TrajectoryLease, event: TrajectoryEvent) -> Refusal | None:
    """Fold ``event`` into ``lease`` and return None, or return why it is refused (the lease is
    then unchanged). ``event`` belongs to the lease's trajectory, which was submitted."""
    match event:
        case TrajectorySubmitted():
            return Refusal("the trajectory was submitted already")
        case Predicted() | Prioritized() | MigrationRequested():
            return None
        case TrajectoryPlaced():
            return _placed(lease, event)
        case ToolReturned():
            return _tool_returned(lease, event)
    if lease.is_ended:
        return _refuse(lease, "the trajectory ended already", event)
    match event:
        case Migrated():
            return _migrated(lease, event)
        case (
            GenerationStarted() | Generated() | GenerationInterrupted() | ToolCalled() | Preempted()
        ):
            return _holder(lease, event.worker_id, event) or _step(lease, event)
        case Completed():
            refusal = _holder(lease, event.worker_id, event)
            if refusal is None:
                lease.is_ended = True
            return refusal
        case Failed():
            return _failed(lease, event)
    return None


def _placed(lease: TrajectoryLease, event: TrajectoryPlaced) -> Refusal | None:
    if lease.is_ended:
        return Refusal("the trajectory ended already")
    if not _is_newer(event.epoch, lease):
        return Refusal(
            f"placement under hosting {event.epoch} is not newer than hosting {lease.max_epoch}"
        )
    lease.host(event.worker_id, event.epoch)
    return None


def _migrated(lease: TrajectoryLease, event: Migrated) -> Refusal | None:
    refusal = _holder(lease, event.source_worker_id, event)
    if refusal is not None:
        return refusal
    if not _is_newer(event.target_epoch, lease):
        return Refusal(
            f"migration to hosting {event.target_epoch} is not newer than hosting {lease.max_epoch}"
        )
    lease.host(event.target_worker_id, event.target_epoch)
    return None


def _is_newer(epoch: int, lease: TrajectoryLease) -> bool:
    """A hosting ``epoch`` may begin: above every one granted (or unnumbered, like all before)."""
    return epoch > lease.max_epoch or epoch == lease.max_epoch == 0


def _holder(lease: TrajectoryLease, worker_id: str, event: TrajectoryEvent) -> Refusal | None:
    """None when ``worker_id`` holds the trajectory under the event's hosting."""
    if not lease.worker_id:
        return _refuse(lease, f"worker {worker_id!r} writes for a trajectory not placed", event)
    if worker_id != lease.worker_id or event.epoch != lease.epoch:
        reason = (
            f"hosting {event.epoch} of worker {worker_id} is stale: {lease.worker_id} holds the "
            f"trajectory under hosting {lease.epoch}"
        )
        return _refuse(lease, reason, event, worker_id)
    return None


def _refuse(
    lease: TrajectoryLease, reason: str, event: TrajectoryEvent, worker_id: str | None = None
) -> Refusal:
    """A refusal that fences the event's writer unless it is the current holder's own."""
    writer = worker_id if worker_id is not None else getattr(event, "worker_id", "")
    if not writer or (writer == lease.worker_id and event.epoch == lease.epoch):
        return Refusal(reason)
    return Refusal(reason, writer, event.epoch)


_StepEvent = GenerationStarted | Generated | GenerationInterrupted | ToolCalled | Preempted


def _step(lease: TrajectoryLease, event: _StepEvent) -> Refusal | None:
    if isinstance(event, GenerationStarted):
        return _started(lease, event)
    current = lease.num_steps - 1
    if event.step != current:
        return Refusal(f"step {event.step}: the trajectory is at step {current}")
    match event:
        case Generated() | GenerationInterrupted() if lease.is_generated:
            return Refusal(f"step {event.step} generated already")
        case Generated():
            lease.is_generated = True
        case ToolCalled() if not lease.is_generated or lease.tool_call_id:
            what = "called a tool already" if lease.tool_call_id else "has no generation yet"
            return Refusal(f"tool call of step {event.step}, which {what}")
        case ToolCalled():
            lease.tool_call_id = event.call_id
    return None


def _started(lease: TrajectoryLease, event: GenerationStarted) -> Refusal | None:
    if event.step != lease.num_steps:
        return Refusal(f"step {event.step} starts, but the next step is {lease.num_steps}")
    if lease.num_steps > 0 and not lease.is_step_over:
        return Refusal(f"step {event.step} starts before step {event.step - 1} is over")
    lease.num_steps += 1
    lease.is_generated = False
    lease.tool_call_id = ""
    lease.is_tool_returned = False
    return None


def _tool_returned(lease: TrajectoryLease, event: ToolReturned) -> Refusal | None:
    """A result answers the call that is out (executors are not hosts: any may answer)."""
    if lease.is_ended:
        return Refusal("the trajectory ended already")
    current = lease.num_steps - 1
    if event.step != current or not lease.tool_call_id:
        return Refusal(f"tool result of step {event.step}: no call of that step is out")
    if event.call_id != lease.tool_call_id:
        out = lease.tool_call_id
        return Refusal(f"tool result of call {event.call_id!r}; the call out is {out!r}")
    if lease.is_tool_returned:
        return Refusal(f"the tool of step {event.step} returned already")
    lease.is_tool_returned = True
    return None


def _failed(lease: TrajectoryLease, event: Failed) -> Refusal | None:
    if lease.worker_id or event.worker_id:
        refusal = _holder(lease, event.worker_id, event)
        if refusal is not None:
            return refusal
    else:
        refusal = _unplaced_failure(lease, event)
        if refusal is not None:
            return refusal
    if event.resubmitted_as and not event.retryable:
        expected = resubmission_id_or_none(lease, event.traj_id)
        if event.resubmitted_as != expected:
            given = event.resubmitted_as
            return Refusal(f"resubmitted as {given!r}; the next attempt is {expected!r}")
    if event.retryable:
        lease.worker_id = ""  # handed back: the control plane places it again
    else:
        lease.is_ended = True
    return None


def _unplaced_failure(lease: TrajectoryLease, event: Failed) -> Refusal | None:
    """None when a failure naming no worker, of a trajectory no worker holds, is the control
    plane's own verdict: final, after an operator's abort or a dead-lettered submission (its
    subject, ``heddle.evt.traj.<r>.<t>.failed.control_plane``, is the control plane's alone)."""
    if not lease.may_fail_unplaced:
        return Refusal(
            "a failure naming no worker, of a trajectory no worker holds: only the control "
            "plane ends one, after an abort request or a dead-lettered submission"
        )
    if not event.is_final:
        return Refusal("a failure naming no worker is the control plane's: never retried")
    return None


def resubmission_id_or_none(lease: TrajectoryLease, traj_id: str) -> str | None:
    """The id the trajectory's slot runs afresh under, None when it has no attempt left."""
    if lease.attempt + 1 >= lease.max_attempts:
        return None
    return resubmission_id(traj_id, lease.attempt + 1)
