"""A lean event decoder for the ledger: token lists are counted, never built.

The ledger stores counts of token ids, not the ids (the stream keeps those), and building
Python lists of hundreds of ints and floats costs more than everything else the projector does
with a step event. This decoder uses views of the event classes, derived from the contract at
import time: each view subclasses its event class (so ``isinstance`` checks and ``match``
statements hold) and declares number-list fields as ``msgspec.Raw`` (the list's JSON text,
skipped over, not parsed). ``heddle.events.arrays.num_items`` counts every form: a decoded
list, a raw plain JSON list, a raw compact array (whose ``n`` is read, its data not decoded).

Validation is the contract's, except for the types of the list elements.
"""

from __future__ import annotations

import typing
from typing import Any, cast

import msgspec

from heddle.events import MAX_PAYLOAD_BYTES, DecodeError, EventT
from heddle.events.arrays import dec_hook, is_array_type, is_number_list_text

_EMPTY = msgspec.Raw(b"[]")


def _view(cls: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """``cls`` itself, or a subclass whose number lists (also in nested structs) are raw."""
    overrides: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for field in msgspec.structs.fields(cls):
        has_default = field.default is not msgspec.NODEFAULT or (
            field.default_factory is not msgspec.NODEFAULT
        )
        if is_array_type(field.type):
            kind: Any = msgspec.Raw
        elif isinstance(field.type, type) and issubclass(field.type, msgspec.Struct):
            kind = _view(field.type)
            if kind is field.type:
                continue
        else:
            continue
        if has_default:
            default = _EMPTY if kind is msgspec.Raw else field.default
            overrides.append((field.name, kind, default))
        else:
            overrides.append((field.name, kind))
    if not overrides:
        return cls
    config = cls.__struct_config__
    return msgspec.defstruct(
        f"{cls.__name__}View",
        overrides,
        bases=(cls,),
        tag=config.tag,
        kw_only=True,
        frozen=config.frozen,
        module=__name__,
    )


_LEAN_TYPES = tuple(_view(cls) for cls in typing.get_args(EventT))
_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(
    typing.Union[_LEAN_TYPES],  # noqa: UP007
    dec_hook=dec_hook,
)


def _raw_fields(view: type[msgspec.Struct]) -> tuple[str, ...]:
    return tuple(field.name for field in msgspec.structs.fields(view) if field.type is msgspec.Raw)


_RAW_FIELDS = {view: _raw_fields(view) for view in _LEAN_TYPES}


def decode_event_lean(data: bytes) -> EventT:
    """Like ``heddle.events.decode_event``, with number lists left as ``msgspec.Raw`` (each
    checked to be a list or a compact array, not any JSON value)."""
    if len(data) > MAX_PAYLOAD_BYTES:
        raise DecodeError(f"event: payload of {len(data)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    try:
        event = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"event: invalid message: {exc}") from None
    except msgspec.DecodeError as exc:
        raise DecodeError(f"event: malformed JSON: {exc}") from None
    for name in _RAW_FIELDS.get(type(event), ()):
        if not is_number_list_text(bytes(getattr(event, name))):
            raise DecodeError(f"event: invalid message: `${name}` is not a list of numbers")
    return cast(EventT, event)
