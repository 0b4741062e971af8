"""The deciders' event decoders: the bulky token lists the deciders only count are not parsed.

A step's ``Generated`` carries its output ids and logprobs (thousands of numbers), a
``Completed`` the whole trajectory's, a ``TrajectorySubmitted`` its prompt's; every decider
receives them, and parsing those lists costs several times what deciding does (a 1000-token
``Generated``: ~80 us parsed, ~15 us skipped). The deciders read only their lengths
(``len(output_token_ids)``) or nothing at all, so these decoders skip the lists as raw JSON and
hand the deciders real events whose id lists are zeros of the right length (logprobs and a
``Completed``'s lists left empty).

Where ids end up in a command, the event goes through whole: the placement decider's
``ToolReturned`` (a ``ContinueTrajectory`` carries it to the worker) and ``TrajectorySubmitted``
(its spec goes to the worker in ``StartTrajectory``): ``decoder_for("placement")``. A decider
that one day reads ids of a counted event must declare it here; ``tests/controlplane`` checks that
every decider decides the same on these decoders and on ``heddle.events.decode_event``.

An array kept in the object store (a prompt over the event size limit,
``heddle.bus.payloads``) is not read back: counted, it counts its ``n``; whole, it stays a
placeholder (``heddle.events.arrays.placeholder``) that deciders count with ``num_items`` and
that a command re-encodes as the same reference, which the worker resolves. Deciders count
lists with ``heddle.events.arrays.num_items``, never ``len``.

A whole spec's prompt ids are decoded as a tuple (``_FROZEN``): the router keeps every live
trajectory's spec, and a tuple of numbers is dropped from the cycle collector's lists after the
first collection it survives, while a list stays in them. Measured on ``heddle bench control``
at 6400 live coding trajectories (~3,500 prompt ids each, 22M list items), every full collection
of the control plane paused it for 270-780 ms with lists; with tuples 5 ms. A tuple encodes as
the same JSON array, so the commands on the wire are byte for byte the same.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from heddle.events import (
    MAX_PAYLOAD_BYTES,
    Completed,
    DecodeError,
    EventT,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    ToolReturned,
    TrajectorySpec,
    TrajectorySubmitted,
)
from heddle.events.arrays import (
    PackedArray,
    TokenIdTuple,
    count_packed,
    dec_hook,
    is_number_list_text,
    placeholder,
    unpack_bytes,
)

_EMPTY = msgspec.Raw(b"[]")
_COUNTED = {
    GenerationStarted: ("input_token_ids",),
    Generated: ("output_token_ids",),
    GenerationInterrupted: ("output_token_ids",),
    ToolReturned: ("output_token_ids",),
    TrajectorySpec: ("prompt_token_ids",),
}
"""Lists a decider may take the length of: given as zeros of the right count."""
_DROPPED = {
    Generated: ("output_logprobs",),
    GenerationInterrupted: ("output_logprobs",),
    Completed: (
        "prompt_token_ids",
        "response_token_ids",
        "response_logprobs",
        "loss_mask",
        "logprob_mask",
    ),
}
"""Lists no decider reads: given empty."""
_FROZEN: dict[type[msgspec.Struct], tuple[str, ...]] = {TrajectorySpec: ("prompt_token_ids",)}
"""Lists of whole structs decoded as tuples (see the module docstring)."""
WHOLE_IN_PLACEMENT: frozenset[type[msgspec.Struct]] = frozenset({ToolReturned, TrajectorySubmitted})

EventDecoder = Callable[[bytes], EventT]


def count_items(raw: msgspec.Raw) -> int:
    """Items of a list of numbers given as its raw JSON text (plain or compact form)."""
    return count_packed(bytes(raw))


class _View:
    """A struct class whose counted and dropped lists are raw JSON, and the way back."""

    def __init__(
        self, cls: type[msgspec.Struct], nested: Mapping[str, _View], *, whole: bool = False
    ) -> None:
        """``whole``: every list is kept (``_FROZEN`` ones as tuples), none counted or dropped."""
        self.cls = cls
        self.counted = () if whole else _COUNTED.get(cls, ())
        self.dropped = () if whole else _DROPPED.get(cls, ())
        frozen = _FROZEN.get(cls, ()) if whole else ()
        self.nested = dict(nested)
        raw_names = set(self.counted) | set(self.dropped)
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        for field in msgspec.structs.fields(cls):
            if field.name in self.nested:
                kind: Any = self.nested[field.name].view_type
            elif field.name in raw_names:
                kind = msgspec.Raw
            elif field.name in frozen:
                # Either wire form; a compact one becomes a plain tuple in ``restore``.
                kind = tuple[int, ...] | PackedArray
            else:
                continue
            has_default = field.default is not msgspec.NODEFAULT or (
                field.default_factory is not msgspec.NODEFAULT
            )
            default = _EMPTY if kind is msgspec.Raw else field.default
            if field.name in frozen and has_default:
                default = ()
            fields.append((field.name, kind, default) if has_default else (field.name, kind))
        config = cls.__struct_config__
        self.view_type: type[msgspec.Struct] = msgspec.defstruct(
            f"{cls.__name__}Counted",
            fields,
            bases=(cls,),
            tag=config.tag,
            kw_only=True,
            frozen=config.frozen,
            module=__name__,
        )
        self.frozen = frozen
        self._names = tuple(n for n in cls.__struct_fields__ if n not in self.dropped)
        self.has_changes = bool(fields)
        """Whether the view decodes anything differently from the class itself."""

    def restore(self, value: Any) -> Any:
        """The real struct: counted lists as zeros, dropped lists left to their defaults;
        ``ValueError`` when a raw list is some other JSON value."""
        for name in (*self.counted, *self.dropped):
            if not is_number_list_text(bytes(getattr(value, name))):
                raise ValueError(f"`${name}` is not a list of numbers")
        values = {name: getattr(value, name) for name in self._names}
        for name in self.counted:
            values[name] = [0] * count_items(values[name])
        for name in self.frozen:
            packed = values[name]
            if isinstance(packed, PackedArray):
                values[name] = _frozen(packed)
        for name, nested in self.nested.items():
            values[name] = nested.restore(values[name])
        return self.cls(**values)


def _frozen(packed: PackedArray) -> tuple[int, ...]:
    """A compact array as a tuple; one kept in the object store as its placeholder (empty, its
    reference in ``heddle.events.arrays.unresolved``; ``num_items`` counts it), which a command
    passes on as the same reference for the worker to resolve."""
    if packed.ref is not None:
        held: tuple[int, ...] = placeholder(TokenIdTuple, packed)
        return held
    return tuple(unpack_bytes(packed).tolist())


def _views(whole: frozenset[type[msgspec.Struct]]) -> dict[type[msgspec.Struct], _View]:
    is_whole = TrajectorySubmitted in whole
    spec = _View(TrajectorySpec, {}, whole=is_whole)
    candidates: dict[type[msgspec.Struct], _View] = {
        Generated: _View(Generated, {}),
        ToolReturned: _View(ToolReturned, {}),
        Completed: _View(Completed, {}),
        TrajectorySubmitted: _View(TrajectorySubmitted, {"spec": spec}, whole=is_whole),
    }
    return {
        cls: view
        for cls, view in candidates.items()
        if cls not in whole or (cls is TrajectorySubmitted and view.nested["spec"].has_changes)
    }


def make_decoder(whole: frozenset[type[msgspec.Struct]] = frozenset()) -> EventDecoder:
    """An event decoder that counts or drops token lists, except in the ``whole`` classes."""
    views = _views(whole)
    by_view: dict[type, _View] = {view.view_type: view for view in views.values()}
    types = tuple(views[cls].view_type if cls in views else cls for cls in typing.get_args(EventT))
    decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(
        typing.Union[types],  # noqa: UP007
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
        view = by_view.get(type(event))
        if view is None:
            return typing.cast(EventT, event)
        try:
            return typing.cast(EventT, view.restore(event))
        except ValueError as exc:  # a compact array whose data does not match its header
            raise DecodeError(f"event: invalid message: {exc}") from None

    return decode


decode_for_deciders = make_decoder()
"""Counts or drops every token list (the slots whose outputs embed no event)."""
decode_for_placement = make_decoder(WHOLE_IN_PLACEMENT)
"""Keeps what ``StartTrajectory`` and ``ContinueTrajectory`` pass on to workers."""


def decoder_for(*slots: str) -> EventDecoder:
    """The decoder of a consumer hosting ``slots`` (a router's stage is named after its deciders,
    ``placement+...``): whole where one of them passes ids on."""
    names = {name for slot in slots for name in slot.split("+")}
    return decode_for_placement if "placement" in names else decode_for_deciders
