"""Compact number arrays inside JSON events: token ids, logprobs and loss masks.

A long list of decimals is most of a step event's bytes (a 256-token ``Generated`` was 7.2 KB).
On the wire such a list is written as an object that names its encoding::

    {"enc": "b64-i32le", "n": 256, "data": "<base64 of 256 little-endian int32>"}

The encodings (standard base64 with padding, RFC 4648 section 4):

- ``b64-i32le``: token ids, little-endian signed int32 (``numpy.frombuffer(raw, "<i4")``).
- ``b64-f32le``: logprobs, little-endian IEEE 754 float32 (``numpy.frombuffer(raw, "<f4")``).
- ``b64-u8``: loss masks, one unsigned byte per item.
- ``b64z-i32le``, ``b64z-f32le``, ``b64z-u8``: the same items compressed: base64 of a zlib
  stream (RFC 1950) of the items' bytes *shuffled* by byte position (every item's byte 0, then
  every item's byte 1, ...; the HDF5 shuffle filter, Parquet's BYTE_STREAM_SPLIT). Byte planes
  hold different kinds of content (an id's high bytes are mostly zero, a logprob's sign and
  exponent repeat, its low mantissa bytes are noise), so the writer ends a deflate block after
  each plane and each gets its own codes; any inflate reads the stream as one.

``n`` is the item count, so a reader can count without decoding (the ledger does).

A writer compresses an array of at least ``MIN_COMPRESSED_ITEMS`` items when that makes its
bytes fewer, and writes it uncompressed otherwise: uniform random int32 ids stay ``b64-i32le``.
A reader refuses a compressed array whose stream is damaged, does not inflate to exactly
``n`` items, or claims more than ``MAX_INFLATED_BYTES`` (no zip bomb gets past a decoder).

Policy (what the round trip keeps):
- Ids and masks round-trip exactly. A list that does not fit its type (an id outside int32, a
  mask value outside 0..255) is written as a plain JSON list, so nothing is ever truncated.
- Logprobs are float32 on the wire, as engines compute them: a float32 value (every logprob an
  engine returns) round-trips exactly; a float64 one is rounded to the nearest float32; a finite
  value beyond float32's range becomes -inf/+inf; NaN and +/-inf are kept (the plain JSON form
  cannot carry them at all).
- Empty lists stay ``[]``; id and mask lists shorter than ``MIN_PACKED_ITEMS`` stay plain lists
  (the object would be longer than the few small numbers it holds). Logprob lists are always
  compact (a float's decimals are long, and the plain form cannot carry NaN or infinities).

An array that would make its event larger than the bus's limit is kept in the object store (the
object holds the bytes ``data`` would hold, base64 decoded, compressed or not) and the field
carries ``{"enc": ..., "n": ..., "ref": {"bucket", "name", "size", "sha256"}}``
(``heddle.bus.payloads``). Decoding such a field gives an empty *placeholder* list whose
``unresolved(values)`` is the reference: code that counts reads ``n`` (``num_items``), code that
needs the values resolves the message first (``heddle.bus.payloads.resolve``), and a
placeholder re-encodes as the same reference, so a message passed on unresolved stays whole.

Decoding accepts both forms: the plain JSON list of streams written before this encoding and
the object above. The struct fields are typed with the classes below, list (and tuple)
subclasses that msgspec hands to ``dec_hook``; for type checkers they are plain ``list[int]``
and ``list[float]``, so code that builds or reads events sees lists.
"""

from __future__ import annotations

import array
import base64
import binascii
import functools
import struct
import sys
import zlib
from typing import TYPE_CHECKING, Any, Final

import msgspec

IDS_ENCODING: Final = "b64-i32le"
LOGPROBS_ENCODING: Final = "b64-f32le"
MASK_ENCODING: Final = "b64-u8"
COMPRESSED_PREFIX: Final = "b64z-"
"""``b64z-i32le`` is ``b64-i32le`` compressed (and so for each encoding)."""
MIN_PACKED_ITEMS: Final = 16
MIN_COMPRESSED_ITEMS: Final = 64
"""Shorter arrays are written uncompressed (zlib's 6 bytes of framing and a block's code
tables outweigh what a few items save)."""
MAX_INFLATED_BYTES: Final = 1 << 28
"""The largest array a reader inflates (256 MiB: 64M token ids, far beyond any context)."""
_ZLIB_LEVEL: Final = 1
"""Deflate's fastest level: ids and logprobs give little to its longer match searches (bytes
within 1% of level 6 on the bench's arrays), and the writer is on a worker's publish path."""


class ObjectRef(msgspec.Struct, frozen=True, kw_only=True):
    """Where an array too large for its event is kept: an object of the JetStream object store
    holding the bytes its ``enc`` names, without base64."""

    bucket: str
    name: str
    size: int
    """Bytes of the object (``n`` x the item size when uncompressed)."""
    sha256: str
    """Hex SHA-256 of the object's bytes; readers check it."""


class PackedArray(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The wire form of a number list (field order is the order a person reads it in): the
    bytes inline (``data``), or a reference to an object holding them (``ref``)."""

    enc: str
    n: int
    data: str = ""
    ref: ObjectRef | None = None


class InlineArray(msgspec.Struct, frozen=True, kw_only=True):
    """What an inline array is encoded from: the bytes its ``enc`` names (compressed or not),
    which msgspec writes as standard base64 with padding (the JSON is a ``PackedArray``'s with
    ``data``; decoding reads that)."""

    enc: str
    n: int
    data: bytes


if TYPE_CHECKING:
    TokenIds = list[int]
    TokenIdTuple = tuple[int, ...]
    Logprobs = list[float]
    LossMask = list[int]
else:

    class TokenIds(list):
        """A list of token ids (``b64-i32le`` on the wire)."""

    class TokenIdTuple(tuple):
        """Token ids decoded as a tuple (kept out of the cycle collector's lists)."""

    class Logprobs(list):
        """A list of logprobs (``b64-f32le`` on the wire)."""

    class LossMask(list):
        """A list of 0/1 loss-mask values (``b64-u8`` on the wire)."""


class _Layout(msgspec.Struct, frozen=True):
    encoding: str
    typecode: str
    list_type: Any
    """The plain form's type (``list[int]``, ``list[float]``), to validate old-form lists."""
    min_items: int

    @property
    def compressed_encoding(self) -> str:
        return COMPRESSED_PREFIX + self.encoding.removeprefix("b64-")

    @property
    def item_size(self) -> int:
        return struct.calcsize(f"<{self.typecode}")

    def accepts(self, encoding: str) -> bool:
        return encoding == self.encoding or self.is_compressed(encoding)

    def is_compressed(self, encoding: str) -> bool:
        return encoding == self.compressed_encoding


_LAYOUTS: dict[type, _Layout] = {
    TokenIds: _Layout(IDS_ENCODING, "i", list[int], MIN_PACKED_ITEMS),
    TokenIdTuple: _Layout(IDS_ENCODING, "i", list[int], MIN_PACKED_ITEMS),
    Logprobs: _Layout(LOGPROBS_ENCODING, "f", list[float], 1),
    LossMask: _Layout(MASK_ENCODING, "B", list[int], MIN_PACKED_ITEMS),
}
_BY_ENCODING = {layout.encoding: layout for layout in _LAYOUTS.values()} | {
    layout.compressed_encoding: layout for layout in _LAYOUTS.values()
}
_SWAP = sys.byteorder != "little"
assert array.array("i").itemsize == 4 and array.array("f").itemsize == 4


def is_array_type(annotation: Any) -> bool:
    """Whether a struct field of this type is written compactly."""
    return annotation in _LAYOUTS


def pack_values(annotation: Any, values: Any) -> InlineArray | PackedArray | None:
    """The wire form of ``values`` for a field of type ``annotation``; None when the plain list
    is the one to write (short lists, values that do not fit the encoding)."""
    if type(values) is not list:  # a plain list holds no reference (and getattr is slow)
        reference = unresolved(values)
        if reference is not None:
            return reference
    layout = _LAYOUTS[annotation]
    if len(values) < layout.min_items:
        return None
    data: bytes | None
    try:
        # struct packs a list several times faster than array.array builds one from it.
        data = _packer(layout.typecode, len(values)).pack(*values)
    except (struct.error, OverflowError, TypeError):
        data = _pack_slowly(layout.typecode, values)  # e.g. a float beyond float32: inf
    if data is None:
        return None
    if len(values) >= MIN_COMPRESSED_ITEMS:
        compressed = _deflate_planes(data, layout.item_size)
        if len(compressed) < len(data):
            return InlineArray(enc=layout.compressed_encoding, n=len(values), data=compressed)
    return InlineArray(enc=layout.encoding, n=len(values), data=data)


def _deflate_planes(data: bytes, item_size: int) -> bytes:
    """The zlib stream of ``data`` shuffled by byte position, a deflate block per plane."""
    compressor = zlib.compressobj(_ZLIB_LEVEL)
    chunks = []
    for offset in range(item_size):
        chunks.append(compressor.compress(data[offset::item_size]))
        chunks.append(compressor.flush(zlib.Z_BLOCK))
    chunks.append(compressor.flush())
    return b"".join(chunks)


def _inflate_planes(compressed: bytes, item_size: int, num_items: int) -> bytes:
    """The items' bytes of a ``b64z-`` array; ``ValueError`` when the stream is damaged or does
    not hold exactly ``num_items`` items."""
    expected = num_items * item_size
    if expected > MAX_INFLATED_BYTES:
        raise ValueError(f"compressed array of n={num_items} exceeds {MAX_INFLATED_BYTES} bytes")
    inflater = zlib.decompressobj()
    try:
        planes = inflater.decompress(compressed, expected + 1)
    except zlib.error as exc:
        raise ValueError(f"damaged compressed array: {exc}") from None
    if len(planes) != expected or not inflater.eof or inflater.unused_data:
        raise ValueError(f"compressed array does not inflate to n={num_items} items")
    if item_size == 1:
        return planes
    items = bytearray(expected)
    for offset in range(item_size):
        items[offset::item_size] = planes[offset * num_items : (offset + 1) * num_items]
    return bytes(items)


@functools.lru_cache(maxsize=256)
def _packer(typecode: str, num_items: int) -> struct.Struct:
    return struct.Struct(f"<{num_items}{typecode}")


def _pack_slowly(typecode: str, values: Any) -> bytes | None:
    """The little-endian bytes ``array.array`` makes of ``values`` (it rounds floats beyond
    float32 to infinities where ``struct`` refuses them); None when they do not fit."""
    try:
        items = array.array(typecode, values)
    except (OverflowError, TypeError):
        return None
    if _SWAP:
        items.byteswap()
    return items.tobytes()


def unresolved(values: Any) -> PackedArray | None:
    """The reference of a placeholder (an array kept in the object store), else None."""
    reference: PackedArray | None = getattr(values, "reference", None)
    return reference


def num_items(values: Any) -> int:
    """Length of a number list in any form: decoded, the placeholder of a referenced one, or
    its raw JSON text (``msgspec.Raw``: a lean decoder's skipped list, plain or compact)."""
    if isinstance(values, msgspec.Raw):
        return count_packed(bytes(values))
    reference = unresolved(values)
    return reference.n if reference is not None else len(values)


def raw_bytes(packed: PackedArray) -> bytes:
    """The inline array's bytes (base64 decoded); ``ValueError`` for bad base64."""
    try:
        return base64.b64decode(packed.data, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"invalid base64 in a {packed.enc} array: {exc}") from None


def unpack_bytes(packed: PackedArray, raw: bytes | None = None) -> array.array[Any]:
    """The items of a wire-form array (``raw``: its bytes, when kept apart from the event);
    ``ValueError`` for an unknown encoding, bad base64, a damaged compressed stream or a byte
    count that does not match ``n``."""
    layout = _BY_ENCODING.get(packed.enc)
    if layout is None:
        raise ValueError(f"unknown array encoding {packed.enc!r}")
    if raw is None:
        raw = raw_bytes(packed)
    items = array.array(layout.typecode)
    if layout.is_compressed(packed.enc) and packed.n >= 0:
        raw = _inflate_planes(raw, layout.item_size, packed.n)
    if packed.n < 0 or len(raw) != packed.n * items.itemsize:
        raise ValueError(f"{packed.enc} array of {len(raw)} bytes does not hold n={packed.n}")
    items.frombytes(raw)
    if _SWAP:
        items.byteswap()
    return items


def count_packed(raw: bytes) -> int:
    """Items of a number list given as its raw JSON text, in either form."""
    text = raw.strip()
    if text.startswith(b"{"):
        return _decode_count(text).n
    return text.count(b",") + 1 if text.strip(b"[] \t\r\n") else 0


class _PackedCount(msgspec.Struct, frozen=True):
    """A ``PackedArray`` read for its count (``data`` and ``ref`` are skipped, not copied)."""

    enc: str
    n: int


_decode_count = msgspec.json.Decoder(_PackedCount).decode


def dec_hook(annotation: type, value: Any) -> Any:
    """msgspec's hook for the array types: a plain JSON list or a ``PackedArray`` object."""
    layout = _LAYOUTS.get(annotation)
    if layout is None:
        raise NotImplementedError(f"no decoder for {annotation!r}")
    if isinstance(value, list):
        return annotation(msgspec.convert(value, layout.list_type))
    if isinstance(value, dict):
        packed = msgspec.convert(value, PackedArray)
        if not layout.accepts(packed.enc):
            raise ValueError(f"expected a {layout.encoding} array, got {packed.enc!r}")
        if packed.ref is not None:
            return placeholder(annotation, packed)
        return annotation(unpack_bytes(packed))  # one pass: no intermediate list
    raise TypeError(f"expected an array or an encoded array object, got {type(value).__name__}")


@functools.cache
def array_fields(cls: type[msgspec.Struct]) -> tuple[tuple[str, Any], ...]:
    """(field name, array type or nested struct class) of every field that may need packing."""
    entries: list[tuple[str, Any]] = []
    for field in msgspec.structs.fields(cls):
        kind = field.type
        is_struct = isinstance(kind, type) and issubclass(kind, msgspec.Struct)
        if is_array_type(kind) or (is_struct and array_fields(kind)):
            entries.append((field.name, kind))
    return tuple(entries)


def pack_message(message: msgspec.Struct) -> msgspec.Struct:
    """``message`` with its number lists (also in nested structs) replaced by their wire form,
    ready for the JSON encoder; ``message`` itself when nothing changes. Only for encoding:
    the copy holds ``PackedArray`` values where its annotations say lists."""
    plan = array_fields(type(message))
    if not plan:
        return message
    changes: dict[str, Any] = {}
    for name, kind in plan:
        value = getattr(message, name)
        if is_array_type(kind):
            packed: Any = pack_values(kind, value)
        else:
            nested = pack_message(value) if isinstance(value, msgspec.Struct) else value
            packed = nested if nested is not value else None
        if packed is not None:
            changes[name] = packed
    return msgspec.structs.replace(message, **changes) if changes else message


def placeholder(annotation: Any, packed: PackedArray) -> Any:
    """An empty list (or tuple) of ``annotation`` standing for a referenced array."""
    if packed.ref is None or not _holds(packed, packed.ref.size):
        raise ValueError(f"a {packed.enc} reference whose size does not hold n={packed.n}")
    value = annotation()
    value.reference = packed
    return value


def _holds(packed: PackedArray, size: int) -> bool:
    """Whether an object of ``size`` bytes can hold the array (a compressed one's size is only
    known once inflated: it must be some bytes, and ``n`` must be inflatable)."""
    layout = _BY_ENCODING.get(packed.enc)
    if layout is None:
        raise ValueError(f"unknown array encoding {packed.enc!r}")
    num_bytes = packed.n * layout.item_size
    if layout.is_compressed(packed.enc):
        return packed.n >= 0 and size > 0 and num_bytes <= MAX_INFLATED_BYTES
    return packed.n >= 0 and size == num_bytes
