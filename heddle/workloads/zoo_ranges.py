"""Documented parameter ranges of the zoo's parameter records: ``Range`` (uniform or
log-uniform, possibly integer-valued), the ``Params`` protocol a record follows (its ``RANGES``,
one per drawn field, and ``to_shape``), and ``draw_params``: every field drawn in field order
from one seeded ``random.Random`` (a preset may narrow a field's range)."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import ClassVar, Protocol, TypeVar

from heddle.workloads.agent_shape import AgentWorkload


@dataclass(frozen=True, slots=True)
class Range:
    """A documented parameter range ``[low, high]``: uniform, or log-uniform when ``is_log``;
    integer-valued when ``is_integer``."""

    low: float
    high: float
    is_log: bool = False
    is_integer: bool = False

    def draw(self, rng: random.Random) -> float:
        if self.is_log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return float(min(self.high, max(self.low, round(value) if self.is_integer else value)))

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


class Params(Protocol):
    RANGES: ClassVar[dict[str, Range]]

    def to_shape(self, name: str) -> AgentWorkload: ...


P = TypeVar("P", bound=Params)


def draw_params(
    cls: type[P], rng: random.Random, overrides: Mapping[str, Range] | None = None
) -> P:
    """A record of ``cls`` with every field drawn from its range (or the range ``overrides``
    gives it: a preset's narrower one), in field order."""
    values: dict[str, float | int] = {}
    for item in fields(cls):  # type: ignore[arg-type]
        span = (overrides or {}).get(item.name, cls.RANGES[item.name])
        drawn = span.draw(rng)
        values[item.name] = int(drawn) if span.is_integer else drawn
    return cls(**values)


def log_range(low: float, high: float) -> Range:
    return Range(low, high, is_log=True)


def int_range(low: int, high: int) -> Range:
    return Range(low, high, is_integer=True)
