"""Filter subjects of a consumer from the event types it handles.

A decider's consumer asks JetStream only for the kinds its decider reacts to (``handles``), so
heartbeats and step events that no decider of that slot reads never reach it.
"""

from __future__ import annotations

from collections.abc import Iterable

from heddle.events import Event
from heddle.events.subjects import DEADLETTER_SUBJECT


def subject_of_kind(event_type: type[Event]) -> str:
    """The wildcard subject carrying every event of ``event_type`` (any rollout or worker)."""
    kind = event_type.kind_name()
    match event_type.family:
        case "traj":
            return f"heddle.evt.traj.*.*.{kind}"
        case "rollout":
            return f"heddle.evt.rollout.*.{kind}"
        case "worker":
            return f"heddle.evt.worker.*.{kind}"
        case "weights":
            return f"heddle.evt.weights.*.{kind}"
        case "deadletter":
            return DEADLETTER_SUBJECT
    raise ValueError(f"{event_type.__name__} has no subject family")


def filter_subjects(event_types: Iterable[type[Event]]) -> tuple[str, ...]:
    """Sorted, de-duplicated subjects of the given event types (a stable consumer config)."""
    return tuple(sorted({subject_of_kind(event_type) for event_type in event_types}))
