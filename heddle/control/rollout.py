"""The rollout decider: emits ``RolloutFinished`` once every trajectory completed or failed, and
resubmits the stale trajectories that have attempts left.

Consumes ``RolloutSubmitted`` (how many trajectories, when), ``TrajectorySubmitted`` (keeps the
spec of a trajectory that may be resubmitted), ``Completed`` (counts it and its output tokens)
and ``Failed`` (counts it when ``is_final``: a retryable one is re-placed by the control plane,
and one ``resubmitted_as`` another id is answered with that id's ``TrajectorySubmitted``, the
same spec with ``attempt`` one higher, and its slot ends with the new trajectory).
Only the rollout's own trajectories count: an end naming an id never submitted to it (a forgery
the gate let through, or a stream written before the gate) is ignored, so a rollout never
finishes while trajectories of its own still run.
The makespan is the last trajectory's end minus the rollout's submission, in model seconds.
A cancelled rollout (``RolloutCancelled``) never finishes: it ended cancelled, and its aborted
trajectories' failures do not turn it into a finished one; it resubmits nothing.

A submission the control plane could not read (its own ``DeadLettered``, role
``control_plane``, naming a trajectory's ``submitted`` subject, of a known rollout, for a
trajectory it never saw submitted) ends that trajectory: a final ``Failed`` naming no worker
(``error``, the dead letter's reason; on the control plane's own failure subject) that the
trainer gets as its record, and that lets the placement place the rollout's other trajectories
(it waits for all of them) and the rollout finish. A dead letter of a submission the control plane
did read, or another role's dead letter, changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from heddle.control.decider import Output
from heddle.events import (
    Completed,
    DeadLettered,
    Event,
    Failed,
    RolloutCancelled,
    RolloutFinished,
    RolloutSubmitted,
    TrajectorySpec,
    TrajectorySubmitted,
)
from heddle.events.subjects import refused_submission
from heddle.ids import derive_id, trajectory_index


@dataclass(slots=True)
class _Rollout:
    num_trajectories: int
    submitted_at: float
    time_scale: float = 1.0
    """Model seconds per wall second: live sim engines run faster than the publishers' clocks."""
    completed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    num_output_tokens: int = 0
    is_finished: bool = False
    resubmittable: dict[str, TrajectorySpec] = field(default_factory=dict)
    """Specs of the running trajectories that have attempts left (the rest are not kept)."""
    resubmitted: set[str] = field(default_factory=set)
    """Trajectories whose slot runs on under another id."""
    submitted: set[str] = field(default_factory=set)
    """Its own trajectories: only their ends count (and those of ``refused``)."""
    refused: set[str] = field(default_factory=set)
    """Trajectories failed for a submission the control plane dead-lettered (once): their
    ``Failed`` ends their slot."""


class RolloutDecider:
    """State: per rollout, which trajectories ended and how."""

    name = "rollout"
    handles: frozenset[type[Event]] = frozenset(
        {RolloutSubmitted, TrajectorySubmitted, Completed, Failed, RolloutCancelled, DeadLettered}
    )

    def __init__(self) -> None:
        self._rollouts: dict[str, _Rollout] = {}

    def decide(self, event: Event) -> list[Output]:
        match event:
            case RolloutSubmitted():
                self._rollouts.setdefault(
                    event.rollout_id,
                    _Rollout(event.num_trajectories, event.occurred_at, event.time_scale),
                )
                return []
            case RolloutCancelled():
                cancelled = self._rollouts.get(event.rollout_id)
                if cancelled is not None:
                    cancelled.is_finished = True  # ended: no RolloutFinished follows
                return []
            case TrajectorySubmitted():
                submitted = self._rollouts.get(event.rollout_id)
                if submitted is None:
                    return []
                submitted.submitted.add(event.traj_id)
                if event.spec.attempt + 1 < event.spec.max_attempts:
                    submitted.resubmittable[event.traj_id] = event.spec
                return []
            case DeadLettered():
                return self._refused_submission(event)
            case Completed():
                rollout = self._own(event)
                if rollout is None or event.traj_id in rollout.completed:
                    return []
                rollout.failed.discard(event.traj_id)
                rollout.completed.add(event.traj_id)
                rollout.num_output_tokens += event.num_output_tokens
                rollout.resubmittable.pop(event.traj_id, None)
            case Failed() if event.resubmitted_as and not event.retryable:
                return self._resubmit(event)
            case Failed():
                rollout = self._own(event)
                if rollout is None or event.retryable or event.traj_id in rollout.completed:
                    return []
                rollout.failed.add(event.traj_id)
                rollout.resubmittable.pop(event.traj_id, None)
            case _:
                return []
        return self._maybe_finish(event, rollout)

    def _refused_submission(self, event: DeadLettered) -> list[Output]:
        refused_ids = refused_submission(event)
        if refused_ids is None:
            return []
        rollout_id, traj_id = refused_ids
        rollout = self._rollouts.get(rollout_id)
        if rollout is None or rollout.is_finished:
            return []
        if traj_id in rollout.submitted or traj_id in rollout.failed or traj_id in rollout.refused:
            return []
        rollout.refused.add(traj_id)
        return [
            Failed(
                event_id=derive_id(event.rollout_id, traj_id, "submission", "failed"),
                rollout_id=event.rollout_id,
                occurred_at=event.occurred_at,
                traj_id=traj_id,
                step=0,
                reason=f"its submission could not be read ({event.reason})"[:2000],
                index=trajectory_index(traj_id),
            )
        ]

    def _own(self, event: Completed | Failed) -> _Rollout | None:
        """The event's rollout, when the trajectory is one of its own (or one whose submission
        it failed)."""
        rollout = self._rollouts.get(event.rollout_id)
        if rollout is None:
            return None
        if event.traj_id not in rollout.submitted and event.traj_id not in rollout.refused:
            return None
        return rollout

    def _resubmit(self, event: Failed) -> list[Output]:
        rollout = self._own(event)
        if rollout is None or event.traj_id in rollout.completed:
            return []
        if event.traj_id in rollout.resubmitted:
            return []
        spec = rollout.resubmittable.pop(event.traj_id, None)
        if spec is None:  # a spec with no attempts left (its worker disagrees): the slot ends
            rollout.failed.add(event.traj_id)
            return self._maybe_finish(event, rollout)
        rollout.resubmitted.add(event.traj_id)
        if rollout.is_finished:  # cancelled: nothing runs again
            return []
        return [
            TrajectorySubmitted(
                event_id=derive_id(event.rollout_id, event.resubmitted_as, "submitted"),
                rollout_id=event.rollout_id,
                traj_id=event.resubmitted_as,
                occurred_at=event.occurred_at,
                spec=msgspec.structs.replace(spec, attempt=spec.attempt + 1),
            )
        ]

    def _maybe_finish(self, event: Event, rollout: _Rollout) -> list[Output]:
        # A resubmitted id is in neither set: its slot ends with the id that runs it afresh.
        num_ended = len(rollout.completed) + len(rollout.failed)
        if rollout.is_finished or num_ended < rollout.num_trajectories:
            return []
        rollout.is_finished = True
        return [
            RolloutFinished(
                event_id=derive_id(event.rollout_id, "finished"),
                rollout_id=event.rollout_id,
                occurred_at=event.occurred_at,
                num_completed=len(rollout.completed),
                num_failed=len(rollout.failed),
                makespan_s=(event.occurred_at - rollout.submitted_at) * rollout.time_scale,
                num_output_tokens=rollout.num_output_tokens,
            )
        ]

    def snapshot(
        self,
    ) -> dict[str, tuple[int, frozenset[str], frozenset[str], frozenset[str], int, bool]]:
        """The state, as a comparable value (replay tests)."""
        return {
            rollout_id: (
                r.num_trajectories,
                frozenset(r.completed),
                frozenset(r.failed),
                frozenset(r.resubmitted),
                r.num_output_tokens,
                r.is_finished,
            )
            for rollout_id, r in self._rollouts.items()
        }
