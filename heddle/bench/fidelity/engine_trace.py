"""A small agentic trace that a CPU torch engine runs in seconds and that still has the shape
that matters: GRPO groups sharing a prompt, a long tail of trajectories with many steps, tool
gaps long enough for prefixes to age, and contexts that outgrow a small KV budget.

Seeded (``random.Random(seed)``), so the live run and the simulator replay the same trace.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from heddle.traces import TraceStep, TraceTrajectory


@dataclass(frozen=True, slots=True)
class EngineTraceShape:
    group_size: int = 4
    min_prompt_tokens: int = 48
    max_prompt_tokens: int = 128
    min_output_tokens: int = 12
    max_output_tokens: int = 96
    """Per step, drawn log-uniformly between the two."""
    min_tool_s: float = 0.2
    max_tool_s: float = 1.0
    min_observation_tokens: int = 12
    max_observation_tokens: int = 48
    short_steps: tuple[int, int] = (2, 4)
    long_steps: tuple[int, int] = (8, 12)
    long_tail_share: float = 0.2
    """Share of trajectories with ``long_steps`` steps (the tail the policies differ on)."""

    def __post_init__(self) -> None:
        if self.group_size < 1 or not 0.0 <= self.long_tail_share <= 1.0:
            raise ValueError("need group_size >= 1 and 0 <= long_tail_share <= 1")


def engine_trace(
    num_trajectories: int, seed: int, shape: EngineTraceShape = EngineTraceShape()
) -> list[TraceTrajectory]:
    """``num_trajectories`` trajectories in groups of ``shape.group_size`` (the last group may
    be smaller); each group's samples share a prompt length and differ in everything else."""
    if num_trajectories < 1:
        raise ValueError(f"num_trajectories must be >= 1, got {num_trajectories}")
    rng = random.Random(seed)
    trace: list[TraceTrajectory] = []
    prompt_tokens = 0
    for index in range(num_trajectories):
        if index % shape.group_size == 0:
            prompt_tokens = rng.randint(shape.min_prompt_tokens, shape.max_prompt_tokens)
        group = f"g{index // shape.group_size:03d}"
        trace.append(
            TraceTrajectory(
                id=f"e{index:04d}",
                group=group,
                prompt_tokens=prompt_tokens,
                steps=_steps(rng, shape),
            )
        )
    return trace


def _steps(rng: random.Random, shape: EngineTraceShape) -> list[TraceStep]:
    low, high = shape.long_steps if rng.random() < shape.long_tail_share else shape.short_steps
    num_steps = rng.randint(low, high)
    steps = []
    for index in range(num_steps):
        is_last = index == num_steps - 1
        steps.append(
            TraceStep(
                output_tokens=_log_uniform(rng, shape.min_output_tokens, shape.max_output_tokens),
                tool_s=0.0 if is_last else rng.uniform(shape.min_tool_s, shape.max_tool_s),
                tool_output_tokens=0
                if is_last
                else rng.randint(shape.min_observation_tokens, shape.max_observation_tokens),
            )
        )
    return steps


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))
