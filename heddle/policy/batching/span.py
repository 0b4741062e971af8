"""Closed-form duration of a chunk of decode steps between two batch-membership changes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from heddle.policy.cost.model import CostModel


def decode_span_s(cost: CostModel, batch_size: int, context_tokens: int, num_steps: int) -> float:
    """Duration of ``num_steps`` decode steps of ``batch_size`` jobs whose contexts total
    ``context_tokens`` at the first step (each step adds ``batch_size`` tokens).

    The sum is closed-form (trapezoid) where the step time is linear in the context, and splits
    at the midpoint where it is not, so it is exact for step times that are linear in the
    context up to a few convex kinks (the calibrated model's memory/compute ``max``).
    """
    if num_steps <= 0 or batch_size <= 0:
        return 0.0
    first = cost.decode_step_s(batch_size, context_tokens)
    if num_steps == 1:
        return first
    last = cost.decode_step_s(batch_size, context_tokens + (num_steps - 1) * batch_size)
    return _span_s(cost, batch_size, context_tokens, num_steps, first, last)


def _span_s(
    cost: CostModel,
    batch_size: int,
    context_tokens: int,
    num_steps: int,
    first: float,
    last: float,
) -> float:
    if num_steps <= 2:
        return first if num_steps == 1 else first + last
    mid = (num_steps - 1) // 2
    mid_value = cost.decode_step_s(batch_size, context_tokens + mid * batch_size)
    chord = first + (last - first) * mid / (num_steps - 1)
    if abs(mid_value - chord) <= 1e-12 + 1e-9 * abs(chord):
        return num_steps * (first + last) / 2
    right_context = context_tokens + (mid + 1) * batch_size
    right_first = cost.decode_step_s(batch_size, right_context)
    left = _span_s(cost, batch_size, context_tokens, mid + 1, first, mid_value)
    right = _span_s(cost, batch_size, right_context, num_steps - mid - 1, right_first, last)
    return left + right


@dataclass(frozen=True, slots=True)
class Chunk:
    """``num_steps`` decode steps at a fixed batch: their duration and, when the step time is
    linear in the context over them (almost always), the first step's time and the growth per
    step, so that any prefix of the chunk is priced without asking the cost model again."""

    num_steps: int
    span_s: float
    first_s: float = 0.0
    slope_s: float = 0.0
    is_linear: bool = False

    def prefix_span_s(self, num_steps: int) -> float:
        """The first ``num_steps`` steps' duration (linear chunks)."""
        return num_steps * self.first_s + self.slope_s * num_steps * (num_steps - 1) / 2

    def steps_covering(self, duration_s: float) -> int:
        """The fewest steps (1..``num_steps``) whose span reaches ``duration_s`` (linear)."""
        slope, first, limit = self.slope_s, self.first_s, self.num_steps
        if slope > 0:
            half = first - slope / 2
            guess = (-half + math.sqrt(half * half + 2 * slope * duration_s)) / slope
        else:
            guess = duration_s / first if first > 0 else 1.0
        steps = min(max(1, math.ceil(guess)), limit)
        while steps > 1 and self.prefix_span_s(steps - 1) >= duration_s:
            steps -= 1
        while steps < limit and self.prefix_span_s(steps) < duration_s:
            steps += 1
        return steps


def plan_chunk(cost: CostModel, batch_size: int, context_tokens: int, num_steps: int) -> Chunk:
    """The chunk of ``num_steps`` steps from ``context_tokens`` (see ``decode_span_s``)."""
    if num_steps <= 0 or batch_size <= 0:
        return Chunk(max(num_steps, 0), 0.0, is_linear=True)
    first = cost.decode_step_s(batch_size, context_tokens)
    if num_steps == 1:
        return Chunk(1, first, first, 0.0, is_linear=True)
    last = cost.decode_step_s(batch_size, context_tokens + (num_steps - 1) * batch_size)
    slope = (last - first) / (num_steps - 1)
    if num_steps > 2:
        mid = (num_steps - 1) // 2
        mid_value = cost.decode_step_s(batch_size, context_tokens + mid * batch_size)
        if abs(mid_value - (first + slope * mid)) > 1e-12 + 1e-9 * abs(mid_value):
            span = _span_s(cost, batch_size, context_tokens, num_steps, first, last)
            return Chunk(num_steps, span)
    return Chunk(num_steps, num_steps * (first + last) / 2, first, slope, is_linear=True)


def steps_covering(
    cost: CostModel, batch_size: int, context_tokens: int, duration_s: float, max_steps: int
) -> int:
    """The fewest steps (1..``max_steps``) whose span reaches ``duration_s``: the step boundary
    at or after a moment ``duration_s`` into the chunk (``max_steps`` if none reaches it)."""
    if max_steps <= 1:
        return max(max_steps, 0)
    chunk = plan_chunk(cost, batch_size, context_tokens, max_steps)
    if chunk.is_linear:
        return chunk.steps_covering(duration_s)
    return _bisect_steps(cost, batch_size, context_tokens, duration_s, max_steps)


def _bisect_steps(
    cost: CostModel, batch_size: int, context_tokens: int, duration_s: float, max_steps: int
) -> int:
    low, high = 1, max_steps
    while low < high:
        mid = (low + high) // 2
        if decode_span_s(cost, batch_size, context_tokens, mid) >= duration_s:
            high = mid
        else:
            low = mid + 1
    return low
