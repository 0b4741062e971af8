"""JSON codec: one encoder, one typed decoder per channel, errors that say what was wrong.

Number lists (token ids, logprobs, loss masks) are written in the compact form of
``heddle.events.arrays`` and read in either form, so streams written before it still decode.

Canonical defaults: a field whose value equals its default is encoded as the default itself.
msgspec's ``omit_defaults`` leaves a field out only when its value *is* the default object, so a
computed ``0.0`` or a ``"stop"`` built at run time would be written while a field never set is
not. ``with_canonical_defaults`` swaps such values for the default objects first, so a message's
JSON depends on its values only. Equal means equal and of the same type (``0`` is not ``0.0``
nor ``False``); ``-0.0`` is not the default ``0.0``, and NaN never equals one.
"""

from __future__ import annotations

import functools
import math
from typing import TypeVar

import msgspec

from heddle.events.arrays import dec_hook, pack_message
from heddle.events.base import Event
from heddle.events.commands import ToolCall, WorkerCommand, WorkerCommandT
from heddle.events.operator import OperatorEventT
from heddle.events.rollout import RolloutEventT
from heddle.events.trajectory import TrajectoryEventT
from heddle.events.weights import WeightsEventT
from heddle.events.worker import (
    DeadLettered,
    ExecutorRegistered,
    WorkerEventT,
    WorkerTelemetry,
)

EventT = (
    TrajectoryEventT
    | RolloutEventT
    | WorkerEventT
    | DeadLettered
    | OperatorEventT
    | WeightsEventT
    | ExecutorRegistered
)

MAX_PAYLOAD_BYTES = 8 * 1024 * 1024
"""Largest message we accept (completed trajectories carry full token lists)."""


class DecodeError(ValueError):
    """A payload that is not a valid message of the expected channel; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(EventT, dec_hook=dec_hook)
_worker_command_decoder = msgspec.json.Decoder(WorkerCommandT, dec_hook=dec_hook)
_tool_call_decoder = msgspec.json.Decoder(ToolCall, dec_hook=dec_hook)
_telemetry_decoder = msgspec.json.Decoder(WorkerTelemetry, dec_hook=dec_hook)


def encode(message: Event | WorkerCommand | ToolCall | WorkerTelemetry) -> bytes:
    """The message's JSON: its ``wire_form``, encoded."""
    return _encoder.encode(wire_form(message))


def encode_wire_form(packed: msgspec.Struct) -> bytes:
    """The JSON of a message's ``wire_form`` (for a caller that keeps the form as well)."""
    return _encoder.encode(packed)


def wire_form(message: msgspec.Struct) -> msgspec.Struct:
    """What the encoder writes of ``message``: number lists in their compact form, and fields
    at their defaults left out where the message's kind leaves them out
    (``with_canonical_defaults``). Only for encoding: see ``pack_message``."""
    return pack_message(with_canonical_defaults(message))


def encode_plain(message: Event | WorkerCommand | ToolCall | WorkerTelemetry) -> bytes:
    """The message's JSON with number lists as plain lists (the form written before the
    compact one; tests use it to stand for old streams)."""
    return _encoder.encode(message)


T = TypeVar("T")
M = TypeVar("M", bound=msgspec.Struct)


def _decode(decoder: msgspec.json.Decoder[T], data: bytes, channel: str) -> T:
    if len(data) > MAX_PAYLOAD_BYTES:
        raise DecodeError(f"{channel}: payload of {len(data)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"{channel}: invalid message: {exc}") from None
    except msgspec.DecodeError as exc:
        raise DecodeError(f"{channel}: malformed JSON: {exc}") from None


def decode_event(data: bytes) -> EventT:
    return _decode(_event_decoder, data, "event")


def decode_worker_command(data: bytes) -> WorkerCommandT:
    return _decode(_worker_command_decoder, data, "worker command")


def decode_tool_call(data: bytes) -> ToolCall:
    return _decode(_tool_call_decoder, data, "tool call")


def decode_telemetry(data: bytes) -> WorkerTelemetry:
    return _decode(_telemetry_decoder, data, "telemetry")


_SCALARS = (bool, int, float, str)


@functools.cache
def _scalar_defaults(cls: type[msgspec.Struct]) -> tuple[tuple[str, object], ...]:
    """The fields of ``cls`` with a scalar default, when ``cls`` leaves defaults out."""
    if not cls.__struct_config__.omit_defaults:
        return ()
    return tuple(
        (field.name, field.default)
        for field in msgspec.structs.fields(cls)
        if type(field.default) in _SCALARS
    )


def with_canonical_defaults(message: M) -> M:
    """``message``, with each value equal to its field's default replaced by the default object
    (``message`` itself when there is none)."""
    changes: dict[str, object] = {}
    for name, default in _scalar_defaults(type(message)):
        value = getattr(message, name)
        if value is not default and _equals(value, default):
            changes[name] = default
    return msgspec.structs.replace(message, **changes) if changes else message


def _equals(value: object, default: object) -> bool:
    if type(value) is not type(default) or value != default:
        return False
    if isinstance(value, float) and isinstance(default, float):
        return math.copysign(1.0, value) == math.copysign(1.0, default)  # -0.0 is kept
    return True
