"""Compact number arrays: the round trip keeps what ``heddle.events.arrays`` promises, the old
plain-list form still decodes, and damaged arrays are refused with a ``DecodeError``."""

from __future__ import annotations

import base64
import json
import math
import struct
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.events import Completed, DecodeError, Generated, decode_event, encode
from heddle.events.arrays import (
    MAX_INFLATED_BYTES,
    MIN_COMPRESSED_ITEMS,
    MIN_PACKED_ITEMS,
    count_packed,
)
from heddle.events.codec import encode_plain

INT32 = st.integers(-(2**31), 2**31 - 1)
VOCAB_IDS = st.integers(0, 151_935) | st.sampled_from([0, 1, 13, 271, 1_024, 151_643])
"""Ids as a tokenizer's: over a vocabulary, some very frequent (lists compress)."""
DTYPES = {"i32le": "<i4", "f32le": "<f4", "u8": "u1"}
FIXTURE = Path(__file__).parents[1] / "replay" / "fixtures" / "old_form_events.jsonl"


def generated(ids: list[int], logprobs: list[float]) -> Generated:
    return Generated(
        event_id="e", occurred_at=1.0, traj_id="t", step=0, worker_id="w",
        output_token_ids=ids, output_logprobs=logprobs,
    )  # fmt: skip


def wire(event: Any) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(encode(event))
    return decoded


def as_float32(value: float) -> float:
    """The reference rounding: IEEE 754 float32 as the struct module does it."""
    try:
        rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)
    return rounded


def reference_decode(field: dict[str, Any]) -> list[Any]:
    """docs/trainer.md's decoder of an inline array, written with zlib and numpy only."""
    raw = base64.b64decode(field["data"], validate=True)
    kind, layout = field["enc"].split("-", 1)
    dtype = np.dtype(DTYPES[layout])
    if kind == "b64z":
        planes = np.frombuffer(zlib.decompress(raw), np.uint8)
        raw = planes.reshape(dtype.itemsize, field["n"]).T.tobytes()
    values: list[Any] = np.frombuffer(raw, dtype).tolist()
    return values


@given(
    st.lists(INT32, max_size=300) | st.lists(VOCAB_IDS, min_size=MIN_COMPRESSED_ITEMS, max_size=600)
)
def test_int32_ids_round_trip_exactly_in_the_compact_form(ids: list[int]) -> None:
    event = generated(ids, [])
    field = wire(event)["output_token_ids"]
    raw = struct.pack(f"<{len(ids)}i", *ids)
    if len(ids) < MIN_PACKED_ITEMS:
        assert field == ids
    elif field["enc"] == "b64-i32le":
        assert field["data"] == base64.b64encode(raw).decode()  # RFC 4648 s.4, padded
        assert len(ids) < MIN_COMPRESSED_ITEMS or len(compress(raw, 4)) >= len(raw)
    else:
        assert field["enc"] == "b64z-i32le" and len(ids) >= MIN_COMPRESSED_ITEMS
        assert len(base64.b64decode(field["data"])) < len(raw)  # compressed only when smaller
    if len(ids) >= MIN_PACKED_ITEMS:
        assert field["n"] == len(ids) and reference_decode(field) == ids
    assert decode_event(encode(event)).output_token_ids == ids  # type: ignore[union-attr]


def compress(raw: bytes, item_size: int) -> bytes:
    """A plain zlib stream of the shuffled bytes (the writer's adds a block per plane)."""
    return zlib.compress(b"".join(raw[offset::item_size] for offset in range(item_size)), 1)


@given(
    st.lists(st.floats(width=32, allow_nan=False), min_size=MIN_COMPRESSED_ITEMS, max_size=400),
    st.lists(st.integers(0, 1), min_size=MIN_COMPRESSED_ITEMS, max_size=400),
)
def test_compressed_logprobs_and_masks_decode_as_the_doc_says(
    logprobs: list[float], mask: list[int]
) -> None:
    event = Completed(
        event_id="c", occurred_at=1.0, traj_id="t", num_steps=1,
        response_token_ids=[7] * len(mask), response_logprobs=logprobs, loss_mask=mask,
    )  # fmt: skip
    fields = wire(event)
    assert fields["loss_mask"]["enc"] == "b64z-u8"  # 0/1 bytes always shrink
    assert reference_decode(fields["loss_mask"]) == mask
    assert reference_decode(fields["response_logprobs"]) == logprobs
    assert decode_event(encode(event)) == event


def test_extreme_ids_and_empty_arrays() -> None:
    ids = [-(2**31), -1, 0, 1, 2**31 - 1] * 4
    assert decode_event(encode(generated(ids, []))).output_token_ids == ids  # type: ignore[union-attr]
    empty = Completed(event_id="c", occurred_at=1.0, traj_id="t", num_steps=0)
    assert wire(empty)["response_token_ids"] == [] and decode_event(encode(empty)) == empty


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=MIN_PACKED_ITEMS, max_size=40))
def test_ids_outside_int32_travel_as_a_plain_list(ids: list[int]) -> None:
    event = generated(ids, [])
    fits = all(-(2**31) <= i < 2**31 for i in ids)
    assert isinstance(wire(event)["output_token_ids"], dict) == fits
    assert decode_event(encode(event)).output_token_ids == ids  # type: ignore[union-attr]


@given(st.lists(st.floats(width=32), max_size=200))
def test_float32_logprobs_round_trip_bit_for_bit(logprobs: list[float]) -> None:
    decoded = decode_event(encode(generated([], logprobs))).output_logprobs  # type: ignore[union-attr]
    assert struct.pack(f"<{len(decoded)}f", *decoded) == struct.pack(
        f"<{len(logprobs)}f", *logprobs
    )


@given(st.lists(st.floats(), min_size=1, max_size=50))
def test_float64_logprobs_round_to_the_nearest_float32(logprobs: list[float]) -> None:
    """NaN stays NaN, infinities stay, finite values beyond float32 become infinities."""
    decoded = decode_event(encode(generated([], logprobs))).output_logprobs  # type: ignore[union-attr]
    assert len(decoded) == len(logprobs)
    for value, back in zip(logprobs, decoded, strict=True):
        if math.isnan(value):
            assert math.isnan(back)
        else:
            assert back == as_float32(value)


@given(st.lists(st.integers(0, 1), max_size=100), st.lists(INT32, max_size=100))
def test_completed_arrays_round_trip(mask: list[int], ids: list[int]) -> None:
    event = Completed(
        event_id="c", occurred_at=1.0, traj_id="t", num_steps=1,
        prompt_token_ids=ids, response_token_ids=ids, response_logprobs=[-0.5] * len(ids),
        loss_mask=mask,
    )  # fmt: skip
    if len(mask) >= MIN_PACKED_ITEMS:
        expected = "b64z-u8" if len(mask) >= MIN_COMPRESSED_ITEMS else "b64-u8"
        assert wire(event)["loss_mask"]["enc"] == expected
    assert decode_event(encode(event)) == event


@given(st.lists(INT32, max_size=50))
def test_counting_reads_n_without_decoding(ids: list[int]) -> None:
    compact = json.dumps(wire(generated(ids, []))["output_token_ids"]).encode()
    plain = json.dumps(ids).encode()
    assert count_packed(compact) == count_packed(plain) == len(ids)


def zipped(raw: bytes, *, cut: int = 0, extra: bytes = b"") -> str:
    """base64 of a zlib stream of ``raw``, its last ``cut`` bytes dropped, ``extra`` after it."""
    stream = zlib.compress(raw)
    return base64.b64encode(stream[: len(stream) - cut] + extra).decode()


@pytest.mark.parametrize(
    "field",
    [
        {"enc": "b64-i32le", "n": 2, "data": base64.b64encode(b"\0" * 4).decode()},
        {"enc": "b64-i32le", "n": 1, "data": "not base64!"},
        {"enc": "b64-f32le", "n": 1, "data": base64.b64encode(b"\0" * 4).decode()},
        {"enc": "zstd", "n": 0, "data": ""},
        {"enc": "b64-i32le", "n": 1},
        {"enc": "b64z-i32le", "n": 1, "data": base64.b64encode(b"\0" * 4).decode()},
        {"enc": "b64z-i32le", "n": 2, "data": zipped(b"\0" * 4)},
        {"enc": "b64z-i32le", "n": 1, "data": zipped(b"\0" * 8)},
        {"enc": "b64z-i32le", "n": 1, "data": zipped(b"\0" * 4, cut=2)},
        {"enc": "b64z-i32le", "n": 1, "data": zipped(b"\0" * 4, extra=b"x")},
        {"enc": "b64z-f32le", "n": 1, "data": zipped(b"\0" * 4)},
        "AAAA",
        [1.5],
    ],
)
def test_damaged_arrays_are_refused(field: Any) -> None:
    payload = json.loads(encode(generated([1] * MIN_PACKED_ITEMS, [])))
    payload["output_token_ids"] = field
    with pytest.raises(DecodeError):
        decode_event(json.dumps(payload).encode())


def test_a_compressed_array_beyond_the_inflate_limit_is_refused_unread() -> None:
    """A zip bomb: a few bytes that claim (and would inflate to) more than the limit."""
    num_items = MAX_INFLATED_BYTES // 4 + 1
    bomb = base64.b64encode(zlib.compress(b"\0" * (1 << 20))).decode()
    payload = json.loads(encode(generated([1] * MIN_PACKED_ITEMS, [])))
    payload["output_token_ids"] = {"enc": "b64z-i32le", "n": num_items, "data": bomb}
    with pytest.raises(DecodeError, match="exceeds"):
        decode_event(json.dumps(payload).encode())


def test_old_form_fixture_decodes_to_the_same_events() -> None:
    """Every event of the old-form fixture (plain lists) decodes, and the compact form of it
    decodes to the same event (logprobs rounded to float32, the documented policy)."""
    lines = FIXTURE.read_text().splitlines()
    assert len(lines) > 50
    for line in lines:
        old = json.dumps(json.loads(line)["payload"]).encode()
        event = decode_event(old)
        assert decode_event(encode_plain(event)) == event
        assert decode_event(encode(event)) == float32_logprobs(event)


def float32_logprobs(event: Any) -> Any:
    for name in ("output_logprobs", "response_logprobs"):
        if hasattr(event, name):
            values = [as_float32(value) for value in getattr(event, name)]
            event = msgspec.structs.replace(event, **{name: values})
    return event
