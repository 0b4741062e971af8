"""Whether a decoded message belongs on the subject it came from.

Every Heddle publisher derives the subject from the message (``subject_for_event``,
``subject_for_command``), so a valid message on another subject (a hand-made publish, a bug,
a fuzzer) is refused: a consumer that took it would fold it under ids its subject does not
name (a trajectory event of rollout A delivered to a filter of rollout B). Runners dead-letter
such messages with the reason this module gives.

A trainer's delivery stream (``heddle.out.<trainer>.<rollout>[.<traj>].<kind>``) holds events the
control plane passed on as they were stored: the subject must name the event's rollout,
trajectory and kind; a trajectory's ``failed`` record may hold the ``Completed`` the control
plane built for the trainer from its failure.
"""

from __future__ import annotations

from heddle.events import Completed, Event, ToolCall, TrajectoryEvent, WorkerCommand
from heddle.events.subjects import (
    DELIVERY_PREFIX,
    parse_subject,
    subject_for_command,
    subject_for_event,
)


def subject_mismatch(subject: str, message: object) -> str | None:
    """Why ``message`` cannot have been published on ``subject``; None when it agrees (or is
    not a Heddle event or command)."""
    if subject.startswith(f"{DELIVERY_PREFIX}.") and isinstance(message, Event):
        return _delivered_mismatch(subject, message)
    try:
        if isinstance(message, Event):
            expected = subject_for_event(message)
        elif isinstance(message, WorkerCommand | ToolCall):
            expected = subject_for_command(message)
        else:
            return None
    except ValueError as exc:
        return f"message with invalid ids: {exc}"
    if expected == subject:
        return None
    return f"wrong subject: published on {subject}, but the message belongs on {expected}"


def _delivered_mismatch(subject: str, event: Event) -> str | None:
    try:
        parts = parse_subject(subject)
    except ValueError as exc:
        return str(exc)
    traj_id = event.traj_id if isinstance(event, TrajectoryEvent) else None
    kinds = {type(event).kind_name()} | ({"failed"} if isinstance(event, Completed) else set())
    if (parts.rollout_id, parts.traj_id) == (event.rollout_id, traj_id) and parts.kind in kinds:
        return None
    return f"wrong subject: delivered on {subject}, but the message is {event.event_id}"
