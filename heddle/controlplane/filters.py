"""Filter subjects of a consumer from the event types it handles.

A decider's consumer asks JetStream only for the kinds its decider reacts to (``handles``), so
heartbeats and step events that no decider of that slot reads never reach it. An event of a kind a
worker writes comes on two subjects (as stored before its writer was named, and under its writer: a
worker, or the control plane for its own failure naming no worker), and so does a worker's report on
a weight version; the control plane reads only its own dead letters (``heddle.events.subjects``).
"""

from __future__ import annotations

from collections.abc import Iterable

from heddle.events import Event
from heddle.events.subjects import (
    CONTROL_PLANE_ROLE,
    deadletter_subject,
    trajectory_subjects,
    weights_subjects,
)


def subjects_of_kind(event_type: type[Event]) -> tuple[str, ...]:
    """The wildcard subjects carrying every event of ``event_type`` (any rollout or worker)."""
    kind = event_type.kind_name()
    match event_type.family:
        case "traj":
            return trajectory_subjects("*", "*", kind)
        case "rollout":
            return (f"heddle.evt.rollout.*.{kind}",)
        case "worker":
            return (f"heddle.evt.worker.*.{kind}",)
        case "weights":
            return weights_subjects("*", kind)
        case "deadletter":
            return (deadletter_subject(CONTROL_PLANE_ROLE),)
    raise ValueError(f"{event_type.__name__} has no subject family")


def filter_subjects(event_types: Iterable[type[Event]]) -> tuple[str, ...]:
    """Sorted, de-duplicated subjects of the given event types (a stable consumer config)."""
    return tuple(sorted({s for event_type in event_types for s in subjects_of_kind(event_type)}))
