"""Decode work that a KV capacity forces: a lower bound on GPU-seconds per decoded token.

Claim. Let a decode step on a worker of ``p`` GPUs (cost model ``m``) run a batch ``S`` whose
contexts ``c_i`` are resident in its KV cache. Sequence ``i`` holds at least ``c_i - s_i`` of
that KV itself, where ``s_i`` is the part of its prompt others may hold for it (a GRPO group's
prompt, held once for the group: ``heddle.policy.bound_facts``), so the KV in use is
``R >= sum_i (c_i - s_i)`` and ``R <= cap = m.max_kv_tokens``. The step reads every sequence's
whole context, ``C = sum_i c_i`` (which may exceed ``cap`` when prompts are shared). Let
``m.decode_floor_terms(b) = (fixed(b), k)`` bound the step from below
(``decode_step_s(b, C) >= fixed(b) + k C``), and let ``F >= 0`` and ``beta`` satisfy
``fixed(b) >= F + beta b`` for every batch the capacity admits. Then

    step >= F + beta |S| + k C  >=  F R / cap + beta |S| + k C
         >=  sum_i (beta + F (c_i - s_i) / cap + k c_i)

because ``R / cap <= 1`` and ``F >= 0``. The step holds ``p`` GPUs, so every token it decodes at
context ``c`` with shared part ``s`` costs at least ``g_p(c, s) = p (beta + F (c - s) / cap + k
c)`` GPU-seconds, and at least ``g(c, s) = min_p g_p(c, s)`` whatever degree runs it. Summed over
every decode token of a workload this bounds the decode GPU-seconds of any schedule, placement,
priority, migration or TP plan. (Counting ``c_i`` for the KV a sequence holds, as this module did
before, is wrong when prompts are shared: a group of 16 on a 3,000-token prompt holds 16 x 3,000
tokens of context in 3,000 + its own tokens of KV.)

Why it is tighter than the per-step floor alone: the fixed cost ``F`` (kernel launches and the
weights read once per step) is shared by a batch, and a batch can only be as large as the KV
holds. Long agentic contexts fill the KV with few sequences, so ``F`` is shared by few tokens:
the term ``F (c - s) / cap`` charges each token its share of the step in proportion to the KV it
occupies. For Qwen3-32B on H200 at TP8, ``F / cap`` adds about a quarter to the KV read cost
``k``.

``F`` and ``beta`` come from the floor: exact from ``decode_linear_terms`` where a model has it
(``AnalyticCostModel``: its floor is linear in the batch); for other models the steepest line
through ``fixed(1)`` below every enumerated ``fixed(b)`` (``F`` clipped at 0), over the batches
of sequences holding at least ``min_resident_tokens`` each. A model without
``decode_floor_terms``, or with too many admissible batches to enumerate, gets no line (callers
then skip this bound).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from heddle.policy.cost.model import CostModel

MAX_ENUMERATED_BATCH = 1 << 16


@runtime_checkable
class DecodeFloor(Protocol):
    def decode_floor_terms(self, batch_size: int) -> tuple[float, float]: ...


@runtime_checkable
class LinearDecodeFloor(Protocol):
    def decode_linear_terms(self) -> tuple[float, float, float]: ...


@dataclass(frozen=True, slots=True)
class TokenCostLine:
    """GPU-seconds of one decode token at context ``c`` on one TP degree: ``base + slope c``,
    less ``per_resident_gpu_s`` for each context token it need not hold (``shifted``)."""

    tp_degree: int
    base_gpu_s: float
    per_context_gpu_s: float
    """``p (F / cap + k)``: the KV it holds and the KV the step reads, per context token."""
    per_resident_gpu_s: float = 0.0
    """``p F / cap``: the share of the step's fixed cost a held KV token pays."""

    def at(self, context_tokens: float) -> float:
        return self.base_gpu_s + self.per_context_gpu_s * context_tokens

    def shifted(self, shared_tokens: float) -> TokenCostLine:
        """The line of a token whose context has ``shared_tokens`` held by others."""
        if not shared_tokens:
            return self
        base = self.base_gpu_s - self.per_resident_gpu_s * shared_tokens
        return TokenCostLine(self.tp_degree, base, self.per_context_gpu_s, self.per_resident_gpu_s)


def token_cost_line(
    tp_degree: int, model: CostModel, min_resident_tokens: float, max_batch: int | None = None
) -> TokenCostLine | None:
    """The line ``g_p`` of the module docstring; None when the model gives no valid one.

    ``min_resident_tokens`` (KV every running sequence holds at least: the shortest prompt, less
    what others may hold of it) bounds the admissible batches by ``max_kv_tokens /
    min_resident_tokens``, and ``max_batch`` (the engines' running cap, the workload's
    trajectories) bounds them too."""
    cap = model.max_kv_tokens
    if cap <= 0:
        return None
    if isinstance(model, LinearDecodeFloor):
        shared_s, per_sequence_s, per_context_s = model.decode_linear_terms()
        if shared_s < 0.0:
            return None
    else:
        if not isinstance(model, DecodeFloor):
            return None
        limit = max_batch_size(cap, min_resident_tokens, max_batch)
        if limit is None:
            return None
        fixed = [model.decode_floor_terms(b)[0] for b in range(1, max(2, limit) + 1)]
        per_context_s = model.decode_floor_terms(1)[1]
        shared_s, per_sequence_s = _linear_minorant(fixed)
    return TokenCostLine(
        tp_degree,
        tp_degree * per_sequence_s,
        tp_degree * (shared_s / cap + per_context_s),
        tp_degree * shared_s / cap,
    )


def max_batch_size(
    max_kv_tokens: int, min_resident_tokens: float, max_batch: int | None
) -> int | None:
    """The largest batch of sequences holding ``min_resident_tokens`` of KV each that fits
    ``max_kv_tokens`` and ``max_batch``; None when unbounded or beyond
    ``MAX_ENUMERATED_BATCH``."""
    limit = max_batch
    if min_resident_tokens > 0:
        by_kv = max(1, math.floor(max_kv_tokens / min_resident_tokens))
        limit = by_kv if limit is None else min(limit, by_kv)
    if limit is None or limit > MAX_ENUMERATED_BATCH:
        return None
    return limit


def _linear_minorant(fixed: Sequence[float]) -> tuple[float, float]:
    """``(F, beta)`` with ``F >= 0`` and ``fixed[b - 1] >= F + beta b`` for every listed ``b``.

    The steepest line through ``fixed(1)`` that stays below every point (exact for a linear
    ``fixed``); if its intercept is negative, the line through the origin instead."""
    first = fixed[0]
    slope = min((value - first) / (index) for index, value in enumerate(fixed[1:], start=1))
    intercept = first - slope
    if intercept >= 0.0:
        return intercept, slope
    return 0.0, min(value / b for b, value in enumerate(fixed, start=1))


def token_cost_lines(
    cost_models: Mapping[int, CostModel],
    min_resident_tokens: float,
    max_batch: int | None = None,
) -> list[TokenCostLine]:
    """One line per usable degree; empty if any degree has none (the bound needs them all)."""
    lines = [
        token_cost_line(tp, model, min_resident_tokens, max_batch)
        for tp, model in cost_models.items()
    ]
    return [line for line in lines if line is not None] if all(lines) else []


class Envelope:
    """``g(c) = min_p g_p(c)`` over integer contexts ``c >= 0``: segments of the lower envelope,
    each with the line that is lowest on it, and closed-form sums over context ranges."""

    def __init__(self, lines: Sequence[TokenCostLine]) -> None:
        if not lines:
            raise ValueError("an envelope needs at least one line")
        crossings = {
            x
            for a in lines
            for b in lines
            if a.per_context_gpu_s != b.per_context_gpu_s
            and math.isfinite(x := _crossing(a, b))
            and x > 0.0
        }
        cuts = sorted({0.0} | crossings)
        self._starts: list[int] = []
        self._lines: list[TokenCostLine] = []
        # Integers in [ceil(cut_i), ceil(cut_i+1)) lie in [cut_i, cut_i+1), where no two lines
        # cross, so the line lowest at the interval's midpoint is lowest on all of them.
        for index, cut in enumerate(cuts):
            start = math.ceil(cut)
            is_last = index + 1 == len(cuts)
            if not is_last and math.ceil(cuts[index + 1]) == start:
                continue  # no integer in this interval
            probe = cut + 1.0 if is_last else (cut + cuts[index + 1]) / 2
            best = min(lines, key=lambda line: line.at(probe))
            if self._lines and self._lines[-1] == best:
                continue
            self._starts.append(start)
            self._lines.append(best)

    def range_gpu_s(self, first_context: int, num_tokens: int) -> float:
        """``sum g(c)`` for ``c = first_context .. first_context + num_tokens - 1``."""
        total = 0.0
        low, high = first_context, first_context + num_tokens  # [low, high)
        for index, start in enumerate(self._starts):
            end = self._starts[index + 1] if index + 1 < len(self._starts) else high
            a, b = max(low, start), min(high, end)
            if a >= b:
                continue
            count = b - a
            line = self._lines[index]
            total += count * line.base_gpu_s + line.per_context_gpu_s * (a + b - 1) * count / 2
        return total


def _crossing(a: TokenCostLine, b: TokenCostLine) -> float:
    return (b.base_gpu_s - a.base_gpu_s) / (a.per_context_gpu_s - b.per_context_gpu_s)


def kv_decode_gpu_s(
    ranges: Iterable[tuple[int, int, float]], lines: Sequence[TokenCostLine]
) -> float:
    """``sum g(c, s)`` over decode-token context ranges ``(first_context, num_tokens,
    shared_tokens)``: one envelope per distinct ``s`` (a workload has few prompt shapes)."""
    envelopes: dict[float, Envelope] = {}
    total: list[float] = []
    for first, count, shared in ranges:
        if count <= 0:
            continue
        envelope = envelopes.get(shared)
        if envelope is None:
            envelope = envelopes[shared] = Envelope([line.shifted(shared) for line in lines])
        total.append(envelope.range_gpu_s(first, count))
    return math.fsum(total)
