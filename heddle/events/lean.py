"""Lean event views: event decoders that skip the number lists their consumer does not read.

A step event's token ids and logprobs are most of its bytes (a ``Completed`` carries its whole
trajectory's, hundreds of KB), and building Python lists of them costs several times what the
ledger or a decider does with the event. A view of an event class subclasses it (``isinstance``
and ``match`` hold) and declares the lists its consumer does not need whole as ``msgspec.Raw``:
the decoder skips over their JSON text, checked only to be a list or a compact array
(``heddle.events.arrays``), not parsed. Everything else is validated as the contract's
``decode_event`` validates it.

Each consumer says what it needs of each list (a ``ListNeed``, by the struct class declaring the
field, nested structs included) and how skipped lists come back (a ``Restore``):

- ``Restore.RAW``: left as their raw JSON text, the event being the view's instance;
  ``heddle.events.arrays.num_items`` counts them (a plain list's commas, a compact array's
  ``n``). The cheapest: nothing is built after decoding. The ledger's.
- ``Restore.LISTS``: the event rebuilt as its own class, a counted list as zeros of its length,
  an unread one at its default, a ``TUPLE`` one as a plain tuple. For code that takes ``len`` of
  lists and re-encodes what it keeps. The deciders'.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from heddle.events import MAX_PAYLOAD_BYTES, DecodeError, EventT
from heddle.events.arrays import (
    PackedArray,
    TokenIdTuple,
    count_packed,
    dec_hook,
    is_array_type,
    placeholder,
    unpack_bytes,
)

_EMPTY = msgspec.Raw(b"[]")
_LIST_STARTS = frozenset(b"[{")
"""The first byte of a number list's JSON text: a plain list or a compact array object. A raw
field starts at its value (msgspec skips the whitespace before it), so one byte is read and
nothing copied (a ``Completed``'s lists are hundreds of KB)."""
_TUPLE: Any = tuple[int, ...] | PackedArray
"""A ``TUPLE`` list as decoded, in either wire form (a compact one becomes a tuple on restore)."""


class ListNeed(enum.Enum):
    """What a consumer needs of a number list field."""

    WHOLE = "whole"
    """Its values, decoded as the contract decodes them."""
    TUPLE = "tuple"
    """Its values as a plain tuple of ints, which the cycle collector stops tracking once it
    survives a collection (a list stays tracked): for ids a consumer keeps long. An array kept
    in the object store stays a placeholder (``heddle.events.arrays.placeholder``)."""
    COUNT = "count"
    """Its length only."""
    NOTHING = "nothing"
    """Nothing (``Restore.LISTS`` gives its default)."""


class Restore(enum.Enum):
    """How the lists a view skipped come back (the module docstring says when to use which)."""

    RAW = "raw"
    LISTS = "lists"


ListNeeds = Mapping[type[msgspec.Struct], Mapping[str, ListNeed]]
"""What a consumer needs of each number list, by the struct class that declares it."""
EventDecoder = Callable[[bytes], EventT]


_Declaration = tuple[str, Any] | tuple[str, Any, Any]


class _StructView:
    """A struct class whose skipped lists (also in nested structs) are raw, and the way back."""

    def __init__(
        self, cls: type[msgspec.Struct], needs: ListNeeds, others: ListNeed, restore: Restore
    ) -> None:
        self.cls = cls
        self.counted: tuple[str, ...] = ()
        self.dropped: tuple[str, ...] = ()
        self.tuples: tuple[str, ...] = ()
        self.nested: dict[str, _StructView] = {}
        own = needs.get(cls, {})
        declared = []
        for field in msgspec.structs.fields(cls):
            if isinstance(field.type, type) and issubclass(field.type, msgspec.Struct):
                kind = self._nested(field.name, _StructView(field.type, needs, others, restore))
            elif is_array_type(field.type):
                kind = self._list(field, own.get(field.name, others), restore)
            else:
                kind = None
            if kind is not None:
                declared.append(_declaration(field, kind))
        self.has_changes = bool(declared)
        """Whether the view decodes anything differently from the class itself."""
        self.view_type = _subclass(cls, declared) if declared else cls
        self.raw: tuple[str, ...] = (*self.counted, *self.dropped)
        self._kept = tuple(name for name in cls.__struct_fields__ if name not in self.dropped)

    def _nested(self, name: str, nested: _StructView) -> Any:
        """The view type of a nested struct field; None where it decodes as its class."""
        if not nested.has_changes:
            return None
        self.nested[name] = nested
        return nested.view_type

    def _list(self, field: msgspec.structs.FieldInfo, need: ListNeed, restore: Restore) -> Any:
        """The view's type of a number list field; None where it is decoded whole."""
        where = f"{self.cls.__name__}.{field.name}"
        if need is ListNeed.WHOLE:
            return None
        if need is ListNeed.TUPLE:
            if restore is Restore.RAW:
                raise ValueError(f"{where}: a TUPLE list needs Restore.LISTS")
            self.tuples += (field.name,)
            return _TUPLE
        if need is ListNeed.COUNT:
            self.counted += (field.name,)
        elif restore is Restore.LISTS and not _has_default(field):
            raise ValueError(f"{where}: an unread list needs a default to restore")
        else:
            self.dropped += (field.name,)
        return msgspec.Raw

    def check(self, value: Any, path: str = "$") -> None:
        """``ValueError`` where a skipped list is some other JSON value (a string, a number)."""
        for name in self.raw:
            if memoryview(getattr(value, name))[0] not in _LIST_STARTS:
                raise ValueError(f"`{path}.{name}` is not a list of numbers")
        for name, nested in self.nested.items():
            nested.check(getattr(value, name), f"{path}.{name}")

    def restore(self, value: Any) -> Any:
        """``value`` (the view's instance) as an instance of the class itself (``Restore.LISTS``);
        ``ValueError`` for a compact tuple whose data does not match its header."""
        values = {name: getattr(value, name) for name in self._kept}
        for name in self.counted:
            values[name] = [0] * count_packed(bytes(values[name]))
        for name in self.tuples:
            if isinstance(values[name], PackedArray):
                values[name] = _as_tuple(values[name])
        for name, nested in self.nested.items():
            values[name] = nested.restore(values[name])
        return self.cls(**values)


def _has_default(field: msgspec.structs.FieldInfo) -> bool:
    return field.default is not msgspec.NODEFAULT or field.default_factory is not msgspec.NODEFAULT


def _declaration(field: msgspec.structs.FieldInfo, kind: Any) -> _Declaration:
    """``field`` redeclared as ``kind``, with a default of that type where it has one: a raw
    list's is ``[]``, a tuple's ``()``, a nested struct's the class's own."""
    if not _has_default(field):
        return (field.name, kind)
    if kind is msgspec.Raw:
        return (field.name, kind, _EMPTY)
    if kind is _TUPLE:
        return (field.name, kind, ())
    if field.default_factory is not msgspec.NODEFAULT:
        return (field.name, kind, msgspec.field(default_factory=field.default_factory))
    return (field.name, kind, field.default)


def _subclass(cls: type[msgspec.Struct], declared: list[_Declaration]) -> type[msgspec.Struct]:
    """A subclass of ``cls`` (its tag and config) redeclaring the ``declared`` fields."""
    config = cls.__struct_config__
    return msgspec.defstruct(
        f"{cls.__name__}Lean",
        declared,
        bases=(cls,),
        tag=config.tag,
        kw_only=True,
        frozen=config.frozen,
        module=__name__,
    )


def _as_tuple(packed: PackedArray) -> tuple[int, ...]:
    """A compact array as a plain tuple; one kept in the object store as its placeholder (empty,
    its reference in ``heddle.events.arrays.unresolved``), which re-encodes as the same
    reference."""
    if packed.ref is not None:
        held: tuple[int, ...] = placeholder(TokenIdTuple, packed)
        return held
    return tuple(unpack_bytes(packed).tolist())


def lean_event_decoder(
    needs: ListNeeds, *, restore: Restore, others: ListNeed = ListNeed.WHOLE
) -> EventDecoder:
    """An event decoder giving every event class its view: ``needs`` for the lists it names,
    ``others`` for every other list of every event (nested structs included). It refuses what
    ``heddle.events.decode_event`` refuses (``DecodeError``), and a skipped list that is no list.
    """
    structs = [_StructView(cls, needs, others, restore) for cls in typing.get_args(EventT)]
    views = {view.view_type: view for view in structs if view.has_changes}
    restores = restore is Restore.LISTS
    decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(
        typing.Union[tuple(view.view_type for view in structs)],  # noqa: UP007
        dec_hook=dec_hook,
    )

    def decode(data: bytes) -> EventT:
        if len(data) > MAX_PAYLOAD_BYTES:
            raise DecodeError(f"event: payload of {len(data)} bytes exceeds {MAX_PAYLOAD_BYTES}")
        try:
            event = decoder.decode(data)
        except msgspec.ValidationError as exc:
            raise DecodeError(f"event: invalid message: {exc}") from None
        except msgspec.DecodeError as exc:
            raise DecodeError(f"event: malformed JSON: {exc}") from None
        view = views.get(type(event))
        if view is None:
            return typing.cast(EventT, event)
        try:
            view.check(event)
            return typing.cast(EventT, view.restore(event) if restores else event)
        except ValueError as exc:
            raise DecodeError(f"event: invalid message: {exc}") from None

    return decode
