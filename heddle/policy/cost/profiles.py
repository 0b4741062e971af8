"""Measured decode profiles: a user's own inter-token latencies as a ``CostModel``.

Two text formats (the caller reads the file; this module stays free of I/O):

CSV, a header then one row per measurement (``#`` starts a comment line)::

    tp,batch,itl_ms
    1,1,7.9
    1,8,8.6
    2,1,5.1

JSON (what ``heddle bench engine`` writes for the torch engine)::

    {"model": "qwen3-8b", "hardware": "h100",
     "itl_ms": {"1": {"1": 7.9, "8": 8.6, "64": 14.0}, "2": {"1": 5.1, "8": 5.6}},
     "prefill_tokens_per_s": {"1": 40000, "2": 76000},
     "max_kv_tokens": {"1": 380000, "2": 900000},
     "context_tokens": 1024}

* ``itl_ms[tp][batch]``: median inter-token latency (milliseconds) with ``batch`` sequences
  decoding together on a TP-``tp`` worker. Required, at least one point per TP degree.
* ``prefill_tokens_per_s[tp]`` and ``max_kv_tokens[tp]``: optional; when absent they come from
  the calibrated preset named by ``model`` and ``hardware`` (``heddle.policy.cost.model``), and
  a profile that has neither is rejected.
* ``context_tokens``: the mean context per sequence during the measurement (default 0). With a
  preset, each context token beyond it adds the preset's KV-read time per decode step, and a
  prefill's attention over its context costs the preset's time per attended pair (the measured
  rate is a short forward's, whose attention is negligible).

Between measured batch sizes the ITL is interpolated linearly; beyond the largest it follows the
last segment's slope; below the smallest it stays at the smallest's value. Measurement noise that
makes ITL dip with batch is flattened (running maximum), so ``F`` stays non-decreasing. Every
error is a ``ValueError`` naming the line (CSV) or the field (JSON).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from heddle.policy.cost.model import HARDWARE, MODELS, AnalyticCostModel, attended_pairs
from heddle.policy.field_checks import (
    non_negative,
    object_field,
    positive_float,
    positive_int,
    string_field,
)


@dataclass(frozen=True, slots=True)
class ItlCurve:
    """ITL in seconds against batch size, non-decreasing; at least one point."""

    batch_sizes: tuple[int, ...]
    itl_s: tuple[float, ...]

    def at(self, batch_size: float) -> float:
        sizes, values = self.batch_sizes, self.itl_s
        if batch_size <= sizes[0]:
            return values[0]
        if batch_size >= sizes[-1]:
            return _extend(self, batch_size)
        hi = bisect_right(sizes, batch_size)
        lo = hi - 1
        weight = (batch_size - sizes[lo]) / (sizes[hi] - sizes[lo])
        return values[lo] + weight * (values[hi] - values[lo])


def _extend(curve: ItlCurve, batch_size: float) -> float:
    """Past the largest measured batch: the last segment's slope (flat for a single point)."""
    sizes, values = curve.batch_sizes, curve.itl_s
    if len(sizes) == 1:
        return values[0]
    slope = (values[-1] - values[-2]) / (sizes[-1] - sizes[-2])
    return values[-1] + slope * (batch_size - sizes[-1])


@dataclass(frozen=True, slots=True)
class ProfiledCostModel:
    """The ``CostModel`` of one TP degree from measured ITLs (module docstring)."""

    tp_degree: int
    curve: ItlCurve
    prefill_tokens_per_s: float
    max_kv_tokens: int
    context_tokens: int = 0
    kv_read_s_per_token: float = 0.0
    """Added decode-step time per context token beyond ``context_tokens`` per sequence."""
    attention_s_per_pair: float = 0.0
    """Prefill time per (new token, attended token) pair (``AnalyticCostModel.prefill_terms``)."""

    def decode_step_s(self, batch_size: int, total_context_tokens: int) -> float:
        if batch_size <= 0:
            return 0.0
        extra = max(0, total_context_tokens - batch_size * self.context_tokens)
        return self.curve.at(batch_size) + self.kv_read_s_per_token * extra

    def decode_floor_terms(self, batch_size: int) -> tuple[float, float]:
        """``(fixed_s, per_context_token_s)`` bounding ``decode_step_s`` from below, linearly
        in the total context (see ``AnalyticCostModel.decode_floor_terms``)."""
        per_token = self.kv_read_s_per_token
        return self.curve.at(batch_size) - per_token * batch_size * self.context_tokens, per_token

    def prefill_s(self, num_tokens: int, num_cached_tokens: int = 0) -> float:
        per_token_s, per_pair_s = self.prefill_terms()
        return per_token_s * max(0, num_tokens) + per_pair_s * attended_pairs(
            num_tokens, num_cached_tokens
        )

    def prefill_terms(self) -> tuple[float, float]:
        """``(per_token_s, per_pair_s)``, as ``AnalyticCostModel.prefill_terms``."""
        return 1.0 / self.prefill_tokens_per_s, self.attention_s_per_pair

    def interference(self, batch_size: int, mean_context_tokens: int = 0) -> float:
        solo = self.decode_step_s(1, mean_context_tokens)
        return self.decode_step_s(batch_size, batch_size * mean_context_tokens) / solo

    def solo_token_s(self, context_tokens: int = 0) -> float:
        return self.decode_step_s(1, context_tokens)


@dataclass(frozen=True, slots=True)
class Profile:
    """A measured profile over one or more TP degrees."""

    itl_ms: Mapping[int, Mapping[int, float]]
    model: str = ""
    hardware: str = ""
    prefill_tokens_per_s: Mapping[int, float] = field(default_factory=dict)
    max_kv_tokens: Mapping[int, int] = field(default_factory=dict)
    context_tokens: int = 0

    @property
    def tp_degrees(self) -> list[int]:
        return sorted(self.itl_ms)

    def cost_model(self, tp_degree: int) -> ProfiledCostModel:
        """The cost model of one TP degree; ``ValueError`` if it was not measured."""
        if tp_degree not in self.itl_ms:
            raise ValueError(f"the profile has no tp {tp_degree}; it has {self.tp_degrees}")
        preset = self._preset(tp_degree)
        return ProfiledCostModel(
            tp_degree=tp_degree,
            curve=_curve(self.itl_ms[tp_degree]),
            prefill_tokens_per_s=self._prefill_rate(tp_degree, preset),
            max_kv_tokens=self._kv_capacity(tp_degree, preset),
            context_tokens=self.context_tokens,
            kv_read_s_per_token=_kv_read_s_per_token(preset),
            attention_s_per_pair=preset.prefill_terms()[1] if preset is not None else 0.0,
        )

    def _preset(self, tp_degree: int) -> AnalyticCostModel | None:
        if self.model in MODELS and self.hardware in HARDWARE and tp_degree in (1, 2, 4, 8):
            return AnalyticCostModel(MODELS[self.model], HARDWARE[self.hardware], tp_degree)
        return None

    def _prefill_rate(self, tp_degree: int, preset: AnalyticCostModel | None) -> float:
        if tp_degree in self.prefill_tokens_per_s:
            return self.prefill_tokens_per_s[tp_degree]
        if preset is not None:
            return 1.0 / preset.prefill_terms()[0]
        raise ValueError(
            f"prefill_tokens_per_s has no tp {tp_degree} and model/hardware name no preset "
            f"(models {sorted(MODELS)}, hardware {sorted(HARDWARE)})"
        )

    def _kv_capacity(self, tp_degree: int, preset: AnalyticCostModel | None) -> int:
        if tp_degree in self.max_kv_tokens:
            return self.max_kv_tokens[tp_degree]
        if preset is not None:
            return preset.max_kv_tokens
        raise ValueError(
            f"max_kv_tokens has no tp {tp_degree} and model/hardware name no preset "
            f"(models {sorted(MODELS)}, hardware {sorted(HARDWARE)})"
        )


def _curve(points: Mapping[int, float]) -> ItlCurve:
    sizes = sorted(points)
    values: list[float] = []
    running = 0.0
    for size in sizes:
        running = max(running, points[size] / 1000.0)
        values.append(running)
    return ItlCurve(tuple(sizes), tuple(values))


def _kv_read_s_per_token(preset: AnalyticCostModel | None) -> float:
    """Reading one more context token's KV per decode step (docs/calibration.md s.1's KV term)."""
    if preset is None:
        return 0.0
    bandwidth = preset.tp_degree * preset.hardware.hbm_bandwidth_bytes_s
    return preset.model.kv_bytes_per_token / bandwidth


def parse_profile(
    text: str,
    fmt: Literal["csv", "json"],
    *,
    source: str = "profile",
    model: str = "",
    hardware: str = "",
) -> Profile:
    """Parse a profile; ``model``/``hardware`` name the preset for a CSV (JSON carries its own).

    ``ValueError`` names ``source`` and the offending line or field."""
    if fmt == "csv":
        return Profile(itl_ms=_parse_csv(text, source), model=model, hardware=hardware)
    if fmt == "json":
        return _parse_json(text, source)
    raise ValueError(f"{source}: unknown profile format {fmt!r}; use 'csv' or 'json'")


def _parse_csv(text: str, source: str) -> dict[int, dict[int, float]]:
    rows = [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.strip().startswith("#")
    ]
    if not rows:
        raise ValueError(f"{source}: empty profile; expected a 'tp,batch,itl_ms' header and rows")
    header_line, header = rows[0]
    if [cell.strip() for cell in header.split(",")] != ["tp", "batch", "itl_ms"]:
        raise ValueError(
            f"{source}:{header_line}: header must be 'tp,batch,itl_ms', got {header!r}"
        )
    itl_ms: dict[int, dict[int, float]] = {}
    for number, line in rows[1:]:
        cells = [cell.strip() for cell in line.split(",")]
        where = f"{source}:{number}"
        if len(cells) != 3:
            raise ValueError(f"{where}: expected 3 columns (tp,batch,itl_ms), got {len(cells)}")
        tp = positive_int(cells[0], f"{where}: tp")
        batch = positive_int(cells[1], f"{where}: batch")
        if batch in itl_ms.get(tp, {}):
            raise ValueError(f"{where}: tp {tp} batch {batch} appears twice")
        itl_ms.setdefault(tp, {})[batch] = positive_float(cells[2], f"{where}: itl_ms")
    if not itl_ms:
        raise ValueError(f"{source}: no measurement rows after the header")
    return itl_ms


def _parse_json(text: str, source: str) -> Profile:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    if not isinstance(document, dict):
        raise ValueError(f"{source}: the top level must be an object")
    known = {
        "model",
        "hardware",
        "itl_ms",
        "prefill_tokens_per_s",
        "max_kv_tokens",
        "context_tokens",
    }
    unknown = sorted(set(document) - known)
    if unknown:
        raise ValueError(f"{source}: unknown field(s) {unknown}; known: {sorted(known)}")
    if "itl_ms" not in document:
        raise ValueError(f"{source}: missing field 'itl_ms'")
    itl_ms = {
        tp: _batch_table(value, f"{source}: itl_ms.{key}")
        for key, value in object_field(document["itl_ms"], f"{source}: itl_ms").items()
        for tp in [positive_int(key, f"{source}: itl_ms key")]
    }
    if not itl_ms:
        raise ValueError(f"{source}: itl_ms is empty")
    return Profile(
        itl_ms=itl_ms,
        model=string_field(document.get("model", ""), f"{source}: model"),
        hardware=string_field(document.get("hardware", ""), f"{source}: hardware"),
        prefill_tokens_per_s=_tp_floats(document, "prefill_tokens_per_s", source),
        max_kv_tokens={
            tp: int(tokens) for tp, tokens in _tp_floats(document, "max_kv_tokens", source).items()
        },
        context_tokens=int(
            non_negative(document.get("context_tokens", 0), f"{source}: context_tokens")
        ),
    )


def _batch_table(value: object, where: str) -> dict[int, float]:
    table = {
        positive_int(key, f"{where} key"): positive_float(item, f"{where}.{key}")
        for key, item in object_field(value, where).items()
    }
    if not table:
        raise ValueError(f"{where}: no batch sizes")
    return table


def _tp_floats(document: dict[str, object], name: str, source: str) -> dict[int, float]:
    if name not in document:
        return {}
    where = f"{source}: {name}"
    return {
        positive_int(key, f"{where} key"): positive_float(item, f"{where}.{key}")
        for key, item in object_field(document[name], where).items()
    }
