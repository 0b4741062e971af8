"""Typed engine options: parse ``name -> string`` pairs into an engine's options dataclass.

Supported field types: ``str``, ``int``, ``float``, ``bool``, ``Path``, ``Literal[...]`` of
strings or ints, and any of these ``| None`` (the string ``none`` gives None). Names may be given
with dashes (``time-scale``) or underscores (``time_scale``).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

T = TypeVar("T")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class EngineOptionError(ValueError):
    """An unknown engine, an unknown option or a value that does not parse; says which."""


@dataclass(frozen=True, slots=True)
class OptionInfo:
    """One option as the CLI shows it."""

    name: str
    type_name: str
    default: str
    help: str


def option_key(name: str) -> str:
    """The dataclass field name for a CLI spelling (``--time-scale`` -> ``time_scale``)."""
    return name.lstrip("-").replace("-", "_")


def parse_options(options_type: type[T], raw: Mapping[str, str], *, what: str = "engine") -> T:
    """An ``options_type`` instance from string values; defaults fill what ``raw`` omits."""
    if not dataclasses.is_dataclass(options_type):
        raise TypeError(f"{options_type!r} is not a dataclass")
    hints = typing.get_type_hints(options_type)
    fields = {field.name: field for field in dataclasses.fields(options_type) if field.init}
    values: dict[str, Any] = {}
    for raw_name, text in raw.items():
        name = option_key(raw_name)
        if name not in fields:
            accepted = ", ".join(f"--{key.replace('_', '-')}" for key in sorted(fields))
            raise EngineOptionError(f"{what}: unknown option --{raw_name}; accepted: {accepted}")
        values[name] = _convert(hints[name], text, f"{what}: option --{raw_name}")
    try:
        return options_type(**values)
    except (TypeError, ValueError) as exc:
        raise EngineOptionError(f"{what}: {exc}") from None


def describe_options(options_type: type[Any]) -> list[OptionInfo]:
    """Name, type, default and help of each option, in declaration order."""
    hints = typing.get_type_hints(options_type)
    infos = []
    for field in dataclasses.fields(options_type):
        if not field.init:
            continue
        default = "" if field.default is dataclasses.MISSING else str(field.default)
        infos.append(
            OptionInfo(
                name=field.name.replace("_", "-"),
                type_name=_type_name(hints[field.name]),
                default=default,
                help=str(field.metadata.get("help", "")),
            )
        )
    return infos


def _convert(hint: Any, text: str, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if text.strip().lower() in ("none", "") and len(members) < len(typing.get_args(hint)):
            return None
        if len(members) != 1:
            raise TypeError(f"{where}: unsupported option type {hint!r}")
        return _convert(members[0], text, where)
    if origin is Literal:
        return _convert_literal(typing.get_args(hint), text, where)
    converter = _CONVERTERS.get(hint)
    if converter is None:
        raise TypeError(f"{where}: unsupported option type {hint!r}")
    try:
        return converter(text)
    except ValueError as exc:
        raise EngineOptionError(f"{where}: {exc}") from None


def _convert_literal(choices: tuple[Any, ...], text: str, where: str) -> Any:
    for choice in choices:
        if str(choice) == text:
            return choice
    raise EngineOptionError(
        f"{where}: {text!r} is not one of {', '.join(str(choice) for choice in choices)}"
    )


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean (use true/false)")


def _parse_int(text: str) -> int:
    try:
        return int(text.strip().replace("_", ""))
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def _parse_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def _parse_str(text: str) -> str:
    return text


_CONVERTERS: dict[Any, Any] = {
    str: _parse_str,
    int: _parse_int,
    float: _parse_float,
    bool: _parse_bool,
    Path: Path,
}


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "|".join(str(choice) for choice in typing.get_args(hint))
    if origin in (types.UnionType, typing.Union):
        return " | ".join(_type_name(arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return "none"
    return getattr(hint, "__name__", str(hint))
