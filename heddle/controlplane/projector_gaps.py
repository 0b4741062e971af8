"""Where a projector's batch starts: whether the stream sequences between the stored position and
the batch's first event hold nothing to project.

A batch handed to the projector may legitimately begin past ``position + 1``: the messages in
between were dead-lettered (undecodable or on a wrong subject: the runner drops them), expired
or were deleted from the stream, or lie outside the consumer's filter. Any other gap means another
process took those messages (two projectors on one durable), and the batch must wait for them:
``LedgerWriter.project`` refuses it (``PositionGap``) unless the projector vouches for the gap.

The check reads the gap's messages from the stream one by one, stopping at the first one that
would be projected: a refused batch costs one read; a vouched gap costs one read per message
(a handful: dead letters are rare, and expiry is answered from the stream's first sequence).
"""

from __future__ import annotations

from collections.abc import Sequence

from heddle.bus import Bus, Decoder
from heddle.events.subjects import EVENTS_STREAM, subject_mismatch


def subject_matches(subject: str, pattern: str) -> bool:
    """NATS subject matching: ``*`` matches one token, a final ``>`` one or more."""
    tokens, wanted = subject.split("."), pattern.split(".")
    for index, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > index
        if index >= len(tokens) or (token != "*" and token != tokens[index]):
            return False
    return len(tokens) == len(wanted)


async def batch_start(
    bus: Bus,
    decode: Decoder[object],
    *,
    position: int,
    first_record: int,
    filter_subjects: Sequence[str],
    floor: int = 1,
    stream: str = EVENTS_STREAM,
) -> int:
    """``position + 1`` when every sequence from there up to ``first_record`` holds nothing to
    project (below ``floor``, expired or deleted, outside ``filter_subjects``, undecodable);
    otherwise ``first_record`` (the writer will refuse the batch)."""
    start = position + 1
    if first_record <= start:
        return first_record
    oldest = (await bus.stream_state(stream)).first_sequence
    for sequence in range(max(start, floor, oldest), first_record):
        stored = await bus.stream_message(stream, sequence)
        if stored is None:
            continue
        subject, data = stored
        if not any(subject_matches(subject, pattern) for pattern in filter_subjects):
            continue
        try:
            message = decode(data)
        except ValueError:
            continue  # dead-lettered by the runner that fetched it
        if subject_mismatch(subject, message) is not None:
            continue  # dead-lettered too
        return first_record
    return start
