"""Parsing JetStream reply subjects (both formats)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.bus.wire import parse_ack_subject, status_of

counts = st.integers(min_value=0, max_value=2**63 - 1)


@given(delivered=counts, sseq=counts, cseq=counts, ts=counts, pending=counts)
def test_v1_and_v2_subjects_give_the_same_fields(
    delivered: int, sseq: int, cseq: int, ts: int, pending: int
) -> None:
    tail = f"{delivered}.{sseq}.{cseq}.{ts}.{pending}"
    v1 = parse_ack_subject(f"$JS.ACK.HEDDLE_EVENTS.ledger.{tail}".encode())
    v2 = parse_ack_subject(f"$JS.ACK.hub.ACCHASH.HEDDLE_EVENTS.ledger.{tail}.tok".encode())
    assert v1 == v2
    assert (v1.stream, v1.consumer) == ("HEDDLE_EVENTS", "ledger")
    assert (v1.num_delivered, v1.stream_sequence, v1.consumer_sequence) == (delivered, sseq, cseq)
    assert (v1.timestamp_ns, v1.num_pending) == (ts, pending)


@pytest.mark.parametrize(
    "reply", [b"", b"_INBOX.abc", b"$JS.ACK.S.c.1.2.3", b"$JS.API.X.a.1.2.3.4.5"]
)
def test_other_subjects_are_refused(reply: bytes) -> None:
    with pytest.raises(ValueError, match="reply subject"):
        parse_ack_subject(reply)


def test_status_codes() -> None:
    assert status_of(b"NATS/1.0 404 No Messages\r\n\r\n") == b"404"
    assert status_of(b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n") is None
    assert status_of(None) is None


class _FakeClient:
    """Stands in for the client around the parser: sinks, and nats-py's slow path."""

    def __init__(self, sink_sids: set[int]) -> None:
        self.frames: list[tuple[str, int, bytes, bytes, bytes, bytes | None]] = []
        self.num_slow = 0
        self._sinks = {sid: self._sink_for(sid) for sid in sink_sids}

    def _sink_for(self, sid: int):  # type: ignore[no-untyped-def]
        def sink(subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
            self.frames.append(("sink", sid, subject, reply, data, headers))

        return sink

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        """Like ``LeanClient._process_msg``: sinks first, nats-py's handling otherwise."""
        self.num_slow += 1
        sink = self._sinks.get(sid)
        if sink is not None:
            sink(subject, reply, data, headers or None)
        else:
            self.frames.append(("slow", sid, subject, reply, data, headers or None))

    async def _process_ping(self) -> None:
        self.frames.append(("ping", 0, b"", b"", b"", None))

    def remember_errors(self, data: bytearray, start: int = 0) -> None:
        """The parser hands over every read holding ``-ERR``, a payload's too (a draw of
        ``st.binary`` can spell it): the client keeps permission errors; here none come."""


def _frame(sid: int, reply: bytes, data: bytes, headers: bytes | None) -> bytes:
    reply_part = b" " + reply if reply else b""
    if headers is None:
        return b"MSG subj.%d %d%s %d\r\n%s\r\n" % (sid, sid, reply_part, len(data), data)
    total = len(headers) + len(data)
    return b"HMSG subj.%d %d%s %d %d\r\n%s%s\r\n" % (
        sid,
        sid,
        reply_part,
        len(headers),
        total,
        headers,
        data,
    )


frames = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 3]),
        st.sampled_from([b"", b"$JS.ACK.S.c.1.2.3.4.5"]),
        st.binary(max_size=300),
        st.sampled_from(
            [None, b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n", b"NATS/1.0 404 No Messages\r\n\r\n"]
        ),
    ),
    max_size=12,
)


@given(frames=frames, cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=10))
async def test_parser_delivers_every_frame_once_in_order(
    frames: list[tuple[int, bytes, bytes, bytes | None]], cuts: list[int]
) -> None:
    from heddle.bus.wire import LeanParser

    client = _FakeClient(sink_sids={1, 2})
    parser = LeanParser(client)  # type: ignore[arg-type]
    stream = b"".join(_frame(*frame) for frame in frames) + b"PING\r\n"
    bounds = sorted({0, len(stream), *(min(cut, len(stream)) for cut in cuts)})
    for start, end in itertools.pairwise(bounds):
        await parser.parse(stream[start:end])
    expected = [
        ("sink" if sid in (1, 2) else "slow", sid, b"subj.%d" % sid, reply, data, headers)
        for sid, reply, data, headers in frames
    ]
    assert client.frames == [*expected, ("ping", 0, b"", b"", b"", None)]


async def test_sink_frames_skip_the_slow_path_even_when_split() -> None:
    from heddle.bus.wire import LeanParser

    client = _FakeClient(sink_sids={1})
    parser = LeanParser(client)  # type: ignore[arg-type]
    stream = b"".join(_frame(1, b"r", b"x" * 50, b"NATS/1.0\r\nA: b\r\n\r\n") for _ in range(5))
    for start in range(0, len(stream), 37):
        await parser.parse(stream[start : start + 37])
    assert len(client.frames) == 5
    assert client.num_slow == 0
