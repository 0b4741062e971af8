"""Finding and replacing a message's number arrays by field path (for ``heddle.bus.payloads``).

A path is the tuple of field names from the message down to the array (``("spec",
"prompt_token_ids")``). Pure functions over msgspec structs; the object store is the bus's.
"""

from __future__ import annotations

from typing import Any

import msgspec

from heddle.events.arrays import (
    InlineArray,
    PackedArray,
    array_fields,
    is_array_type,
    unresolved,
)

Path = tuple[str, ...]


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
