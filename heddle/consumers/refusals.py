"""What the deciders' pipeline dead-letters: events it could not decode, and events a decider
refused (one dead letter per event, whatever number of deciders refused it)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from heddle.bus import Rejection
from heddle.events import DeadLettered
from heddle.events.subjects import parse_subject
from heddle.ids import derive_id

log = logging.getLogger(__name__)

_MAX_PAYLOAD_CHARS = 4096


@dataclass(frozen=True, slots=True)
class Refused:
    """An event to dead-letter: undecodable, or refused by the deciders."""

    subject: str
    reply: str
    sequence: int
    data: bytes
    reason: str


def merge(rejected: dict[int, Refused], rejection: Rejection) -> None:
    """One dead letter per refused event, whatever number of deciders refused it."""
    d = rejection.delivery
    earlier = rejected.get(d.stream_sequence)
    reason = rejection.reason
    if earlier is not None:
        if reason in earlier.reason:
            return
        reason = f"{earlier.reason}; {reason}"
    rejected[d.stream_sequence] = Refused(
        d.subject, d.ack_subject, d.stream_sequence, d.data, reason
    )


def dead_letter(event: Refused, durable: str, stream: str) -> DeadLettered:
    """The dead letter of a refused event (its id derives from the consumer and the sequence:
    refused again after a redelivery, it is stored once)."""
    try:
        rollout_id = parse_subject(event.subject).rollout_id or ""
    except ValueError:
        rollout_id = ""
    sequence = event.sequence
    log.warning("%s dead-letters %s #%d: %s", durable, event.subject, sequence, event.reason)
    return DeadLettered(
        event_id=derive_id("deadletter", durable, stream, sequence),
        rollout_id=rollout_id,
        occurred_at=time.time(),
        consumer=durable,
        subject=event.subject,
        stream_sequence=sequence,
        reason=event.reason[:2000],
        payload=event.data[:_MAX_PAYLOAD_CHARS].decode("utf-8", errors="replace"),
    )
