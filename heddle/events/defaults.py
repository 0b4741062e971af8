"""Canonical defaults: a field whose value equals its default is encoded as the default itself.

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

M = TypeVar("M", bound=msgspec.Struct)

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
