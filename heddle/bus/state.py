"""What JetStream reports about a stream and its durable consumers (the bus's read-only state
queries; ``Bus.stream_state`` etc. call these). Leader elections in a cluster answer with
transient errors, which are asked again (``heddle.bus.transient``); a missing stream, message or
consumer is ``None``/``False``, never an exception, except ``stream_state`` of an unknown stream
(``NotFoundError``)."""

from __future__ import annotations

from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from heddle.bus.transient import retry_transient


@dataclass(frozen=True, slots=True)
class StreamState:
    num_messages: int
    first_sequence: int
    last_sequence: int
    num_bytes: int


@dataclass(frozen=True, slots=True)
class ConsumerState:
    num_pending: int
    """Messages not yet delivered."""
    num_ack_pending: int
    """Delivered, not yet acknowledged."""
    delivered_sequence: int
    """Stream sequence of the last delivered message."""
    ack_floor_sequence: int
    """Stream sequence up to which everything is acknowledged."""
    num_waiting: int = 0
    """Pull requests waiting for messages (consumers idle and ready to take work)."""


async def stream_state(js: JetStreamContext, stream: str) -> StreamState:
    info = await retry_transient(lambda: js.stream_info(stream), f"stream {stream}")
    state = info.state
    return StreamState(state.messages, state.first_seq, state.last_seq, state.bytes)


async def has_stream(js: JetStreamContext, stream: str) -> bool:
    try:
        await retry_transient(lambda: js.stream_info(stream), f"stream {stream}")
    except NotFoundError:
        return False
    return True


async def num_subject_messages(js: JetStreamContext, stream: str, subject: str) -> int:
    info = await js.stream_info(stream, subjects_filter=subject)
    return int((info.state.subjects or {}).get(subject, 0))


async def num_matching_messages(js: JetStreamContext, stream: str, subjects: str) -> int:
    """How many messages ``stream`` holds on the subjects ``subjects`` matches (wildcards).
    Asked again while the server answers with a transient error (a timeout on a loaded
    machine), like the other reads of a stream's state."""
    info = await retry_transient(
        lambda: js.stream_info(stream, subjects_filter=subjects), f"stream {stream} ({subjects})"
    )
    return sum((info.state.subjects or {}).values())


async def last_subject_message(
    js: JetStreamContext, stream: str, subject: str
) -> tuple[int, bytes] | None:
    """(sequence, payload) of the last message stored on ``subject``; None when there is none."""
    try:
        message = await js.get_last_msg(stream, subject)
    except NotFoundError:
        return None
    return message.seq or 0, message.data or b""


async def stream_message(
    js: JetStreamContext, stream: str, sequence: int
) -> tuple[str, bytes] | None:
    try:
        message = await js.get_msg(stream, sequence)
    except NotFoundError:
        return None
    return message.subject or "", message.data or b""


async def consumer_state(js: JetStreamContext, stream: str, durable: str) -> ConsumerState | None:
    try:
        info = await retry_transient(
            lambda: js.consumer_info(stream, durable), f"consumer {durable}"
        )
    except NotFoundError:
        return None
    return ConsumerState(
        num_pending=info.num_pending or 0,
        num_ack_pending=info.num_ack_pending or 0,
        delivered_sequence=(info.delivered.stream_seq or 0) if info.delivered else 0,
        ack_floor_sequence=(info.ack_floor.stream_seq or 0) if info.ack_floor else 0,
        num_waiting=info.num_waiting or 0,
    )


async def delete_consumer(js: JetStreamContext, stream: str, durable: str) -> bool:
    try:
        await js.delete_consumer(stream, durable)
    except NotFoundError:
        return False
    return True
