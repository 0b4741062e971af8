"""The pure-Python BLAKE3 against the specification's vector and the reference bindings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.blake3 import blake3_digest, blake3_u64_le


def test_the_empty_input_vector() -> None:
    # BLAKE3 specification, test_vectors.json: input length 0.
    expected = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    assert blake3_digest(b"").hex() == expected


@settings(max_examples=60, deadline=None)
@given(data=st.one_of(st.binary(max_size=200), st.binary(min_size=1000, max_size=5000)))
def test_agrees_with_the_reference_bindings(data: bytes) -> None:
    blake3 = pytest.importorskip("blake3", reason="the blake3 bindings are a dev extra")
    assert blake3_digest(data) == blake3.blake3(data).digest()


def test_ring_position_is_the_first_eight_bytes_little_endian() -> None:
    digest = blake3_digest(b"http://127.0.0.1:8000#0")
    assert blake3_u64_le("http://127.0.0.1:8000#0") == int.from_bytes(digest[:8], "little")
