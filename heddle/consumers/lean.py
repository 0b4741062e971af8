"""The deciders' event decoder: the bulky token lists the deciders only count are not parsed.

A step's ``Generated`` carries its output ids and logprobs (thousands of numbers), a
``Completed`` the whole trajectory's; every decider slot receives them, and parsing those lists
costs several times what deciding does (a 1000-token ``Generated``: ~80 us parsed, ~15 us
skipped). The deciders read only their lengths (``len(output_token_ids)``) or nothing at all, so
this decoder skips the lists as raw JSON and hands the deciders real ``Generated`` events whose
``output_token_ids`` is a list of zeros of the right length (no logprobs), and ``Completed``
events without token lists.

Events whose token ids end up in a command go through whole: ``ToolReturned`` (a
``ContinueTrajectory`` carries it to the worker) and ``TrajectorySubmitted`` (its spec goes to
the worker in ``StartTrajectory``). A decider that one day reads the ids of a ``Generated`` or a
``Completed`` must use ``heddle.events.decode_event`` instead; ``tests/consumers`` checks that
every decider decides the same on both decoders.
"""

from __future__ import annotations

import typing
from typing import Any

import msgspec

from heddle.events import MAX_PAYLOAD_BYTES, Completed, DecodeError, EventT, Generated

_SKIPPED_LISTS: dict[type[msgspec.Struct], tuple[str, ...]] = {
    Generated: ("output_token_ids", "output_logprobs"),
    Completed: ("prompt_token_ids", "response_token_ids", "response_logprobs", "loss_mask"),
}
_EMPTY = msgspec.Raw(b"[]")


def _view(cls: type[msgspec.Struct], names: tuple[str, ...]) -> type[msgspec.Struct]:
    """A subclass of ``cls`` with the named list fields left as raw JSON."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for field in msgspec.structs.fields(cls):
        if field.name not in names:
            continue
        has_default = field.default is not msgspec.NODEFAULT or (
            field.default_factory is not msgspec.NODEFAULT
        )
        fields.append(
            (field.name, msgspec.Raw, _EMPTY) if has_default else (field.name, msgspec.Raw)
        )
    config = cls.__struct_config__
    return msgspec.defstruct(
        f"{cls.__name__}Counted",
        fields,
        bases=(cls,),
        tag=config.tag,
        kw_only=True,
        frozen=config.frozen,
        module=__name__,
    )


_VIEWS = {cls: _view(cls, names) for cls, names in _SKIPPED_LISTS.items()}
_TYPES = tuple(_VIEWS.get(cls, cls) for cls in typing.get_args(EventT))
_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(typing.Union[_TYPES])  # noqa: UP007
_GENERATED_FIELDS = Generated.__struct_fields__
_COMPLETED_FIELDS = tuple(
    name for name in Completed.__struct_fields__ if name not in _SKIPPED_LISTS[Completed]
)


def count_items(raw: msgspec.Raw) -> int:
    """Items of a JSON list of numbers given as its raw text."""
    text = bytes(raw)
    return text.count(b",") + 1 if text.strip(b"[] \t\r\n") else 0


def decode_for_deciders(data: bytes) -> EventT:
    """Like ``heddle.events.decode_event``; ``Generated`` ids become zeros of the same count and
    ``Completed`` token lists are left out (see the module docstring)."""
    if len(data) > MAX_PAYLOAD_BYTES:
        raise DecodeError(f"event: payload of {len(data)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    try:
        event = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"event: invalid message: {exc}") from None
    except msgspec.DecodeError as exc:
        raise DecodeError(f"event: malformed JSON: {exc}") from None
    kind = type(event)
    if kind is _VIEWS[Generated]:
        values = {name: getattr(event, name) for name in _GENERATED_FIELDS}
        values["output_token_ids"] = [0] * count_items(event.output_token_ids)
        values["output_logprobs"] = []
        return Generated(**values)
    if kind is _VIEWS[Completed]:
        return Completed(**{name: getattr(event, name) for name in _COMPLETED_FIELDS})
    return typing.cast(EventT, event)
