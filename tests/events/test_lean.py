"""The lean event views (heddle.events.lean): the ledger's and the deciders' decoders agree with
the contract's full decode on every field they keep, in every wire form of a list (plain,
compact, compressed, kept in the object store), and refuse a skipped list that is no list."""

from __future__ import annotations

import json
import typing
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.controlplane.decider_decoders import (
    DECIDERS_NEEDS,
    PLACEMENT_NEEDS,
    decode_for_deciders,
    decode_for_placement,
)
from heddle.events import (
    DecodeError,
    EventT,
    Generated,
    TrajectorySpec,
    TrajectorySubmitted,
    decode_event,
    encode,
)
from heddle.events.arrays import (
    IDS_ENCODING,
    LOGPROBS_ENCODING,
    MASK_ENCODING,
    Logprobs,
    LossMask,
    TokenIds,
    is_array_type,
    num_items,
    unresolved,
)
from heddle.events.lean import EventDecoder, ListNeed, ListNeeds, Restore, lean_event_decoder
from heddle.ledger.lean_decoder import decode_event_lean

from .test_codec import events, struct_strategy

CONSUMERS: list[tuple[EventDecoder, ListNeeds, ListNeed, Restore]] = [
    (decode_event_lean, {}, ListNeed.COUNT, Restore.RAW),
    (decode_for_deciders, DECIDERS_NEEDS, ListNeed.WHOLE, Restore.LISTS),
    (decode_for_placement, PLACEMENT_NEEDS, ListNeed.WHOLE, Restore.LISTS),
]
"""Each consumer's decoder and what it declares it needs (heddle.ledger.lean_decoder,
heddle.controlplane.decider_decoders)."""

_OFFLOADED = {
    TokenIds: (IDS_ENCODING, 4),
    Logprobs: (LOGPROBS_ENCODING, 4),
    LossMask: (MASK_ENCODING, 1),
}
"""An offloaded list's encoding and item size, by field type."""
_LONG = {
    TokenIds: st.lists(st.integers(-(2**31), 2**31 - 1) | st.integers(0, 50), min_size=16),
    Logprobs: st.lists(st.floats(width=32, allow_nan=False) | st.just(-0.5), min_size=16),
    LossMask: st.lists(st.integers(0, 1), min_size=16),
}
"""Lists long enough for the compact and compressed forms (repeated values compress)."""


def list_fields(cls: type[msgspec.Struct]) -> list[msgspec.structs.FieldInfo]:
    return [field for field in msgspec.structs.fields(cls) if is_array_type(field.type)]


def nested_fields(cls: type[msgspec.Struct]) -> list[msgspec.structs.FieldInfo]:
    return [
        field
        for field in msgspec.structs.fields(cls)
        if isinstance(field.type, type) and issubclass(field.type, msgspec.Struct)
    ]


@st.composite
def lengthened(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with some of its lists (nested ones too) drawn long."""
    changes = {
        field.name: draw(_LONG[field.type])
        for field in list_fields(type(value))
        if draw(st.booleans())
    }
    for field in nested_fields(type(value)):
        changes[field.name] = draw(lengthened(getattr(value, field.name)))
    return msgspec.structs.replace(value, **changes)


def offload(draw: st.DrawFn, cls: type[msgspec.Struct], document: dict[str, Any]) -> None:
    """Some lists of ``document`` replaced by references to the object store, as
    ``heddle.bus.payloads`` writes them (the objects are never read here)."""
    for field in list_fields(cls):
        value = document.get(field.name)
        if value is None or not draw(st.booleans()):
            continue
        n = value["n"] if isinstance(value, dict) else len(value)
        encoding, item_size = _OFFLOADED[field.type]
        reference = {"bucket": "b", "name": field.name, "size": n * item_size, "sha256": "0" * 64}
        document[field.name] = {"enc": encoding, "n": n, "ref": reference}
    for field in nested_fields(cls):
        if field.name in document:
            offload(draw, field.type, document[field.name])


def has_lists(cls: type[msgspec.Struct]) -> bool:
    return bool(list_fields(cls)) or any(has_lists(field.type) for field in nested_fields(cls))


LIST_EVENTS = [cls for cls in typing.get_args(EventT) if has_lists(cls)]
events_with_lists = st.sampled_from(LIST_EVENTS).flatmap(struct_strategy)
"""Each event class with lists equally often (they are a few of the many)."""


@st.composite
def wire_events(draw: st.DrawFn) -> bytes:
    """An encoded event with lists in every wire form."""
    event = draw(lengthened(draw(events_with_lists)))
    data = encode(event)
    if not draw(st.booleans()):
        return data
    document = json.loads(data)
    offload(draw, type(event), document)
    return json.dumps(document).encode()


def assert_list_kept(lean: Any, full: Any, need: ListNeed, restore: Restore) -> None:
    """A list field of a lean view against the full decode, by what its consumer needs."""
    if need is ListNeed.WHOLE:
        assert type(lean) is type(full) and lean == full
        assert unresolved(lean) == unresolved(full)
    elif need is ListNeed.TUPLE:
        assert isinstance(lean, tuple) and lean == tuple(full)
        assert unresolved(lean) == unresolved(full)
        assert type(lean) is tuple or unresolved(lean) is not None
    elif restore is Restore.RAW:
        assert isinstance(lean, msgspec.Raw) and num_items(lean) == num_items(full)
    elif need is ListNeed.COUNT:
        assert type(lean) is list and lean == [0] * num_items(full)
    else:
        assert lean == []


def assert_view_agrees(
    lean: Any, full: Any, needs: ListNeeds, others: ListNeed, restore: Restore
) -> None:
    if restore is Restore.RAW:
        assert isinstance(lean, type(full))
    else:
        assert type(lean) is type(full)
    cls = type(full)
    lists = {field.name for field in list_fields(cls)}
    nested = {field.name for field in nested_fields(cls)}
    for name in cls.__struct_fields__:
        kept, whole = getattr(lean, name), getattr(full, name)
        if name in lists:
            need = needs.get(cls, {}).get(name, others)
            assert_list_kept(kept, whole, need, restore)
        elif name in nested:
            assert_view_agrees(kept, whole, needs, others, restore)
        else:
            assert kept == whole, name


def assert_views_agree(data: bytes) -> None:
    full = decode_event(data)
    for decode, needs, others, restore in CONSUMERS:
        assert_view_agrees(decode(data), full, needs, others, restore)


@settings(max_examples=300)
@given(wire_events())
def test_every_view_agrees_with_the_full_decode_on_what_it_keeps(data: bytes) -> None:
    assert_views_agree(data)


@given(events)
def test_every_view_of_any_event_agrees_with_the_full_decode(event: Any) -> None:
    assert_views_agree(encode(event))


def test_the_strategy_draws_every_event_with_lists() -> None:
    names = {cls.__name__ for cls in LIST_EVENTS}
    assert {"Generated", "Completed", "ToolReturned", "TrajectorySubmitted"} <= names


def test_the_views_skip_what_their_consumers_declare() -> None:
    """The check above could pass with every list decoded whole: the views do skip."""
    spec = TrajectorySpec(group_id="g", index=0, environment="e", prompt_token_ids=list(range(40)))
    submitted = TrajectorySubmitted(
        event_id="e", rollout_id="r", occurred_at=1.0, traj_id="t", spec=spec
    )
    ledger, deciders, placement = (decode(encode(submitted)) for decode, *_ in CONSUMERS)
    assert isinstance(ledger, TrajectorySubmitted)
    assert isinstance(ledger.spec.prompt_token_ids, msgspec.Raw)
    assert isinstance(deciders, TrajectorySubmitted) and deciders.spec.prompt_token_ids == [0] * 40
    assert isinstance(placement, TrajectorySubmitted)
    assert placement.spec.prompt_token_ids == tuple(range(40))


def _generated(output_token_ids: str) -> bytes:
    event = Generated(
        event_id="e",
        rollout_id="r",
        traj_id="t",
        occurred_at=1.0,
        step=0,
        worker_id="w",
        output_token_ids=[1, 2],
    )
    document = json.loads(encode(event))
    document["output_token_ids"] = json.loads(output_token_ids)
    return json.dumps(document).encode()


@pytest.mark.parametrize("value", ['"12"', "12", "null", "true"])
@pytest.mark.parametrize("decode", [decode for decode, *_ in CONSUMERS])
def test_a_skipped_list_that_is_no_list_is_refused(decode: EventDecoder, value: str) -> None:
    with pytest.raises(DecodeError, match=r"`\$\.output_token_ids` is not a list of numbers"):
        decode(_generated(value))


@pytest.mark.parametrize("decode", [decode_event_lean, decode_for_deciders])
def test_a_nested_skipped_list_that_is_no_list_is_refused(decode: EventDecoder) -> None:
    spec = TrajectorySpec(group_id="g", index=0, environment="e", prompt_token_ids=[1])
    submitted = TrajectorySubmitted(
        event_id="e", rollout_id="r", occurred_at=1.0, traj_id="t", spec=spec
    )
    document = json.loads(encode(submitted))
    document["spec"]["prompt_token_ids"] = "1"
    data = json.dumps(document).encode()
    with pytest.raises(DecodeError):
        decode_event(data)
    with pytest.raises(DecodeError, match=r"`\$\.spec\.prompt_token_ids` is not a list"):
        decode(data)


def test_a_view_that_cannot_restore_is_refused_when_built() -> None:
    with pytest.raises(ValueError, match=r"needs Restore\.LISTS"):
        lean_event_decoder(
            {TrajectorySpec: {"prompt_token_ids": ListNeed.TUPLE}}, restore=Restore.RAW
        )
    with pytest.raises(ValueError, match="needs a default"):
        lean_event_decoder(
            {Generated: {"output_token_ids": ListNeed.NOTHING}}, restore=Restore.LISTS
        )
