"""The JSON codec: every event and command round-trips; the decoders refuse anything else with a
``DecodeError`` (never another exception), whatever bytes they are fed."""

from __future__ import annotations

import json
import math
import types
import typing
from typing import Any, Literal

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from heddle.events import (
    MAX_PAYLOAD_BYTES,
    SCHEMA_VERSION,
    Command,
    Completed,
    DecodeError,
    EventT,
    Failed,
    Generated,
    ToolCall,
    TrajectoryEvent,
    WorkerCommandT,
    WorkerTelemetry,
    decode_event,
    decode_telemetry,
    decode_tool_call,
    decode_worker_command,
    encode,
)
from heddle.events.arrays import Logprobs, LossMask, TokenIds, TokenIdTuple
from heddle.events.subjects import (
    parse_subject,
    subject_for_command,
    subject_for_event,
    written_by,
)
from heddle.events.weights import WeightsEvent

EVENT_TYPES = typing.get_args(EventT)
COMMAND_TYPES = typing.get_args(WorkerCommandT)
ids = st.from_regex(r"\A[A-Za-z0-9_-]{1,20}\Z")
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
_ID_FIELDS = {
    "rollout_id",
    "traj_id",
    "worker_id",
    "source_worker_id",
    "executor_id",
    "pool",
    "event_id",
    "command_id",
}
_OPTIONAL_ID_FIELDS = {"sent_by", "role"}
"""Ids that may be empty (a worker command the control plane sent names no sender, a dead
letter written before roles were named no role)."""


def strategy_for(annotation: Any, name: str = "") -> st.SearchStrategy[Any]:
    """Values of ``annotation`` that JSON can carry exactly (finite floats, 64-bit ints)."""
    if name in _ID_FIELDS and annotation is str:
        return ids
    if name in _OPTIONAL_ID_FIELDS and annotation is str:
        return st.one_of(st.just(""), ids)
    if name == "weight_version" and annotation is int:
        return st.integers(0, 2**53)  # versions are >= 0 (the decoders refuse others)
    if annotation is Any:
        return json_values
    if annotation is type(None):
        return st.none()
    if annotation is str:
        return st.text(max_size=30)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(-(2**63), 2**63 - 1)
    if annotation is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if annotation in (TokenIds, TokenIdTuple, LossMask):
        # Full 64-bit range: lists that do not fit the compact form travel as plain lists.
        return st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(0, 1), max_size=8)
    if annotation is Logprobs:
        # Logprobs travel as float32 (heddle.events.arrays states the policy).
        return st.lists(st.floats(width=32, allow_nan=False), max_size=8)
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is Literal:
        return st.sampled_from(arguments)
    if origin is list:
        return st.lists(strategy_for(arguments[0]), max_size=8)
    if origin is dict:
        return st.dictionaries(st.text(max_size=10), strategy_for(arguments[1]), max_size=4)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([strategy_for(argument) for argument in arguments])
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return struct_strategy(annotation)
    raise TypeError(f"no strategy for {annotation!r}")


def struct_strategy(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    fields = {
        field.name: strategy_for(hints[field.name], field.name)
        for field in msgspec.structs.fields(cls)
    }
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


events = st.one_of([struct_strategy(cls) for cls in EVENT_TYPES])
commands = st.one_of([struct_strategy(cls) for cls in COMMAND_TYPES])


@given(events)
def test_events_round_trip(event: Any) -> None:
    assert decode_event(encode(event)) == event


@given(commands)
def test_worker_commands_round_trip(command: Any) -> None:
    assert decode_worker_command(encode(command)) == command


@given(struct_strategy(ToolCall))
def test_tool_calls_round_trip(call: ToolCall) -> None:
    assert decode_tool_call(encode(call)) == call


@given(struct_strategy(WorkerTelemetry))
def test_telemetry_round_trips(telemetry: WorkerTelemetry) -> None:
    assert decode_telemetry(encode(telemetry)) == telemetry


@given(events)
def test_event_subjects_parse_back(event: Any) -> None:
    parts = parse_subject(subject_for_event(event))
    assert parts.family == type(event).family
    if parts.kind is not None:
        assert parts.kind == type(event).kind_name()
    assert parts.rollout_id in (None, event.rollout_id)
    assert parts.executor_id in (None, getattr(event, "executor_id", None))
    if isinstance(event, TrajectoryEvent | WeightsEvent):
        assert parts.sent_by == written_by(event)


@given(commands)
def test_command_subjects_parse_back(command: Any) -> None:
    parts = parse_subject(subject_for_command(command))
    assert (parts.family, parts.worker_id, parts.kind, parts.sent_by) == (
        "cmd.worker",
        command.worker_id,
        type(command).action,
        command.sent_by or None,
    )


_TRAINER_RECORDS = (Completed, Failed)
"""The trajectory events a trainer reads: written in full, like every event outside ``traj``."""


def _default_of(field: Any) -> Any:
    if field.default_factory is not msgspec.NODEFAULT:
        return field.default_factory()
    return field.default


def _holds_default(value: Any, field: Any) -> bool:
    """Whether ``value`` is the field's default: equal, of the same type, and of the same sign
    for a float zero (the rule of ``heddle.events.codec``)."""
    default = _default_of(field)
    if default is msgspec.NODEFAULT:
        return False
    if isinstance(default, list):
        return isinstance(value, list) and not value
    if type(value) is not type(default) or value != default:
        return False
    return not isinstance(value, float) or math.copysign(1.0, value) == math.copysign(1.0, default)


@given(st.one_of(events, commands))
def test_only_step_events_and_commands_leave_out_their_defaults(message: Any) -> None:
    """A ``traj`` step or decision event or a command leaves out exactly the fields that hold
    their defaults, however the values were built; ``kind``, the id, the time and ``version``
    are always there, and the events a trainer reads are written in full."""
    payload = msgspec.json.decode(encode(message))
    omits = isinstance(message, TrajectoryEvent | Command) and not isinstance(
        message, _TRAINER_RECORDS
    )
    always = {"event_id", "command_id", "occurred_at", "issued_at", "version"}
    for field in msgspec.structs.fields(message):
        value = getattr(message, field.name)
        left_out = omits and field.name not in always and _holds_default(value, field)
        assert (field.name not in payload) == left_out, field.name
    assert payload["version"] == message.version
    assert payload["kind"] == type(message).__struct_config__.tag


@given(events)
def test_equal_events_encode_to_the_same_bytes(event: Any) -> None:
    """The JSON depends on the values only: the event rebuilt with its defaults' own objects
    where it holds equal values (a computed 0.0, a "stop" built at run time) encodes the same."""
    fields = msgspec.structs.fields(event)
    rebuilt = {
        field.name: (
            _default_of(field)
            if _holds_default(getattr(event, field.name), field)
            else getattr(event, field.name)
        )
        for field in fields
    }
    assert encode(type(event)(**rebuilt)) == encode(event)


def test_a_message_without_version_reads_as_the_current_schema() -> None:
    generated = Generated(
        event_id="r:t:0:generated",
        traj_id="t",
        occurred_at=1.0,
        step=0,
        worker_id="w",
        output_token_ids=[1, 2, 3],
    )
    payload = msgspec.json.decode(encode(generated))
    assert payload == {
        "kind": "traj.generated",
        "event_id": "r:t:0:generated",
        "occurred_at": 1.0,
        "version": SCHEMA_VERSION,
        "traj_id": "t",
        "step": 0,
        "worker_id": "w",
        "output_token_ids": [1, 2, 3],
    }
    del payload["version"]
    assert decode_event(msgspec.json.encode(payload)) == generated


DECODERS = [decode_event, decode_worker_command, decode_tool_call, decode_telemetry]


@pytest.mark.parametrize("decode", DECODERS)
@settings(max_examples=300)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_are_refused_cleanly(decode: Any, data: bytes) -> None:
    """Bytes that are not a JSON object can never be a message: each is refused with a reason."""
    try:
        is_object = isinstance(json.loads(data), dict)
    except (ValueError, UnicodeDecodeError):
        is_object = False
    assume(not is_object)
    with pytest.raises(DecodeError) as refused:
        decode(data)
    assert refused.value.reason


def _mutations(payload: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A valid payload with one field dropped, retyped or added."""
    keys = sorted(payload)
    dropped = st.sampled_from(keys).map(lambda key: {k: v for k, v in payload.items() if k != key})
    retyped = st.tuples(st.sampled_from(keys), json_values).map(
        lambda change: {**payload, change[0]: change[1]}
    )
    added = st.tuples(st.text(max_size=8), json_values).map(
        lambda extra: {**payload, extra[0]: extra[1]}
    )
    return dropped | retyped | added


@settings(max_examples=300)
@given(data=st.data())
def test_mutated_events_decode_or_are_refused_cleanly(data: st.DataObject) -> None:
    event = data.draw(events)
    payload = msgspec.json.decode(encode(event))
    mutated = data.draw(_mutations(payload))
    try:
        decoded = decode_event(msgspec.json.encode(mutated))
    except DecodeError as exc:
        assert exc.reason.startswith("event:")
    else:
        assert type(decoded).__struct_config__.tag == mutated["kind"]


def test_oversize_payloads_are_refused() -> None:
    payload = b" " * (MAX_PAYLOAD_BYTES + 1)
    for decode in DECODERS:
        with pytest.raises(DecodeError, match="exceeds"):
            decode(payload)


def test_errors_name_the_problem() -> None:
    with pytest.raises(DecodeError, match="malformed JSON"):
        decode_event(b"{")
    with pytest.raises(DecodeError, match=r"traj\.nope"):
        decode_event(b'{"kind": "traj.nope"}')
    with pytest.raises(DecodeError, match="occurred_at"):
        decode_event(b'{"kind": "traj.generated", "event_id": "x", "occurred_at": "now"}')
