"""The lean ledger decoder agrees with the contract's decoder on everything the ledger keeps."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.events import DecodeError, Generated, decode_event, encode
from heddle.events.arrays import num_items
from heddle.ledger import LedgerWriter, open_ledger
from heddle.ledger.compare import compare_ledgers
from heddle.ledger.lean_decoder import decode_event_lean

from .lifecycle import everything


@given(st.lists(st.integers(min_value=-(2**40), max_value=2**40)))
def test_num_items_counts_raw_int_lists(values: list[int]) -> None:
    assert num_items(msgspec.Raw(msgspec.json.encode(values))) == len(values) == num_items(values)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False)))
def test_num_items_counts_raw_float_lists(values: list[float]) -> None:
    assert num_items(msgspec.Raw(msgspec.json.encode(values))) == len(values)


def test_views_are_the_event_classes() -> None:
    for event in everything():
        lean = decode_event_lean(encode(event))
        assert isinstance(lean, type(event))
        assert lean.event_id == event.event_id
    first = next(event for event in everything() if isinstance(event, Generated))
    generated = decode_event_lean(encode(first))
    assert isinstance(generated, Generated)
    assert isinstance(generated.output_token_ids, msgspec.Raw)


@pytest.mark.parametrize("payload", [b"{nope", b'{"kind": "traj.unknown"}', b"[]"])
def test_bad_payloads_are_refused_like_the_contract(payload: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_event(payload)
    with pytest.raises(DecodeError):
        decode_event_lean(payload)


def test_projecting_lean_events_gives_the_same_ledger(tmp_path: Path) -> None:
    events = everything()
    full = open_ledger(f"sqlite:///{tmp_path / 'full.db'}")
    lean = open_ledger(f"sqlite:///{tmp_path / 'lean.db'}")
    LedgerWriter(full, "x").project(list(enumerate(events, start=1)))
    lean_events = [decode_event_lean(encode(event)) for event in events]
    LedgerWriter(lean, "x").project(list(enumerate(lean_events, start=1)))
    assert compare_ledgers(full, lean).mismatches == []
    full.close()
    lean.close()
