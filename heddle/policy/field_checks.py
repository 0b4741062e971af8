"""Checks for fields of user-written files: each returns the value or raises a ``ValueError``
that starts with ``where`` (a file name with a line number or a field path)."""

from __future__ import annotations

import math


def object_field(value: object, where: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object keyed by TP degree / batch size")
    return value


def string_field(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {value!r}")
    return value


def positive_int(value: object, where: str) -> int:
    try:
        number = int(str(value))
    except ValueError:
        raise ValueError(f"{where}: expected a positive integer, got {value!r}") from None
    if number < 1:
        raise ValueError(f"{where}: expected a positive integer, got {value!r}")
    return number


def positive_float(value: object, where: str) -> float:
    number = non_negative(value, where)
    if number == 0.0:
        raise ValueError(f"{where}: must be > 0, got {value!r}")
    return number


def non_negative(value: object, where: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected a number, got {value!r}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0.0:
        raise ValueError(f"{where}: must be finite and >= 0, got {value!r}")
    return number
