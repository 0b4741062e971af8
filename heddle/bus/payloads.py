"""Events too large for a message: their biggest number arrays move to the object store.

NATS refuses a message over the server's ``max_payload`` (1 MiB by default, and NATS advises
against large messages), while a 256k-token trajectory's ``Completed`` is about 3 MB even in the
compact form. Before publishing, an event (or command) whose JSON exceeds
``Settings.max_event_bytes`` (256 KiB by default) has its largest inline arrays, biggest first,
put in bucket ``heddle-payloads`` until it fits; each such field then carries a reference::

    {"enc": "b64-i32le", "n": 262144,
     "ref": {"bucket": "heddle-payloads", "name": "<rollout>/<event id>/<field path>",
             "size": 1048576, "sha256": "<hex>"}}

The object holds the array's raw bytes (the layout ``enc`` names, no base64). The object is
stored before the event is published, so a stored event never refers to a missing object; its
name derives from the event id, so a publish retried after a crash writes the same object again.
The reference is part of the event (its digest is what the event asserts); ``resolve`` checks
size and SHA-256 of what it reads and refuses a mismatch.

Retention: the bucket keeps an object ``BusOptions.payload_max_age_s`` after it was written (the
bucket's ``max_age``, 7 days by default), and ``Bus.delete_payloads(rollout_id)`` (``heddle
rollout delete-payloads <rid>``) removes a finished rollout's objects at once. A consumer that
only counts (the ledger, the deciders, replay and verify) reads ``n`` and never needs the object,
so an expired object costs only the token values of that one field, never a replay.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec

from heddle.events.arrays import (
    InlineArray,
    ObjectRef,
    PackedArray,
    array_fields,
    is_array_type,
    unpack_bytes,
    unresolved,
)

M = TypeVar("M", bound=msgspec.Struct)
Path = tuple[str, ...]
"""A field path from a message down to an array (``("spec", "prompt_token_ids")``)."""
Put = Callable[[str, bytes], Awaitable[object]]
Get = Callable[[str, str], Awaitable[bytes]]
"""(bucket, object name) -> the object's bytes."""

_encode = msgspec.json.Encoder().encode


class PayloadError(ValueError):
    """A referenced object that is missing or whose size or digest differs from the event's."""


def object_name(rollout_id: str, message_id: str, path: Path) -> str:
    """The object of one array of one message; prefixed by the rollout for its clean-up."""
    return f"{payload_prefix(rollout_id)}{message_id}/{'.'.join(path)}"


def payload_prefix(rollout_id: str) -> str:
    """What the names of a rollout's objects start with (``-/`` for messages of none)."""
    return f"{rollout_id or '-'}/"


async def offload(
    packed: msgspec.Struct,
    data: bytes,
    *,
    message_id: str,
    max_bytes: int,
    bucket: str,
    put: Put,
) -> bytes:
    """``data`` (``packed``, a message's ``wire_form``, encoded) when it is at most
    ``max_bytes``; else ``packed`` encoded with its largest arrays put (``put(name, bytes)``)
    in ``bucket`` until it fits (or none is left: the publish then reports the size as
    before)."""
    if len(data) <= max_bytes:
        return data
    rollout_id = str(getattr(packed, "rollout_id", ""))
    size = len(data)
    for path, array in sorted(inline_arrays(packed), key=lambda item: -len(item[1].data)):
        if size <= max_bytes:
            break
        raw = array.data
        name = object_name(rollout_id, message_id, path)
        await put(name, raw)
        reference = ObjectRef(
            bucket=bucket, name=name, size=len(raw), sha256=hashlib.sha256(raw).hexdigest()
        )
        packed = replace_at(packed, path, PackedArray(enc=array.enc, n=array.n, ref=reference))
        size -= _base64_length(len(raw)) - len(_encode(reference)) - 8
    return _encode(packed)


async def resolve(message: M, get: Get) -> M:
    """``message`` with every placeholder replaced by the values of its object (size and
    SHA-256 checked: ``PayloadError`` when they differ or the object is gone)."""
    for path, kind, packed in placeholders(message):
        reference = packed.ref
        assert reference is not None
        try:
            raw = await get(reference.bucket, reference.name)
        except KeyError:
            raise PayloadError(f"object {reference.bucket}/{reference.name} is missing") from None
        _check(reference, raw)
        values: Any = kind(unpack_bytes(packed, raw).tolist())
        message = replace_at(message, path, values)  # type: ignore[assignment]
    return message


def _base64_length(num_bytes: int) -> int:
    return 4 * ((num_bytes + 2) // 3)


def has_references(message: msgspec.Struct) -> bool:
    return bool(placeholders(message))


def _check(reference: ObjectRef, raw: bytes) -> None:
    if len(raw) != reference.size:
        raise PayloadError(
            f"object {reference.name} has {len(raw)} bytes, the event says {reference.size}"
        )
    digest = hashlib.sha256(raw).hexdigest()
    if digest != reference.sha256:
        raise PayloadError(
            f"object {reference.name} has SHA-256 {digest}, the event says {reference.sha256}"
        )


# Finding and replacing a message's arrays by field path: pure functions over msgspec structs.
def inline_arrays(packed: msgspec.Struct, prefix: Path = ()) -> list[tuple[Path, InlineArray]]:
    """Every inline array of a message that ``arrays.pack_message`` packed."""
    found: list[tuple[Path, InlineArray]] = []
    for name, kind in array_fields(type(packed)):
        value = getattr(packed, name)
        if isinstance(value, InlineArray):
            found.append(((*prefix, name), value))
        elif not is_array_type(kind) and isinstance(value, msgspec.Struct):
            found += inline_arrays(value, (*prefix, name))
    return found


def placeholders(message: msgspec.Struct, prefix: Path = ()) -> list[tuple[Path, Any, PackedArray]]:
    """(path, array type, reference) of every placeholder of a decoded message."""
    found: list[tuple[Path, Any, PackedArray]] = []
    for name, kind in array_fields(type(message)):
        value = getattr(message, name)
        if is_array_type(kind):
            reference = unresolved(value)
            if reference is not None:
                found.append(((*prefix, name), kind, reference))
        elif isinstance(value, msgspec.Struct):
            found += placeholders(value, (*prefix, name))
    return found


def replace_at(message: msgspec.Struct, path: Path, value: Any) -> msgspec.Struct:
    """A copy of ``message`` with the field at ``path`` set to ``value`` (not validated)."""
    head, *rest = path
    if rest:
        value = replace_at(getattr(message, head), tuple(rest), value)
    return msgspec.structs.replace(message, **{head: value})
