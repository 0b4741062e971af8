"""Parsing JetStream reply subjects (both formats)."""

from __future__ import annotations

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
