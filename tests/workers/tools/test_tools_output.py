"""Capped output capture against a brute-force reference."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from heddle.workers.tools.output import CappedBuffer


@given(st.lists(st.binary(max_size=50), max_size=20), st.integers(min_value=1, max_value=200))
def test_keeps_the_first_bytes_and_counts_the_rest(chunks: list[bytes], max_bytes: int) -> None:
    buffer = CappedBuffer(max_bytes)
    for chunk in chunks:
        buffer.feed(chunk)
    everything = b"".join(chunks)
    assert buffer.data == everything[:max_bytes]
    assert buffer.num_dropped_bytes == len(everything) - len(everything[:max_bytes])


def test_text_marks_truncation_and_survives_bad_utf8() -> None:
    buffer = CappedBuffer(4)
    buffer.feed(b"ab\xffcdef")
    assert buffer.text() == "ab\ufffdc\n[output truncated: 3 more bytes dropped]"
    whole = CappedBuffer(10)
    whole.feed(b"ok\n")
    assert whole.text() == "ok\n"
