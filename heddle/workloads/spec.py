"""The parameters of a synthetic agentic workload, as typed data.

A workload draws GRPO groups: one prompt (with a difficulty factor) sampled ``group_size`` times.
Each sample has its own effort factor, so the same prompt gives very different trajectories
(docs/calibration.md s.2, the paper's Fig. 5). Both factors scale the number of turns and the length
of each generation; the first generation is the plan, so it carries a signal about the rest (the
paper, s.4.1: "the initial step's plan is a strong semantic indicator").
"""

from __future__ import annotations

from dataclasses import dataclass

from heddle.workloads.distributions import LogNormal


@dataclass(frozen=True, slots=True)
class TurnModel:
    """How many generation turns a trajectory takes.

    A sample is either ordinary (``body``) or, with probability ``tail_probability`` times the
    prompt's difficulty, a long-horizon one (``tail``). Either draw is scaled by
    ``(difficulty * effort) ** effort_exponent``, rounded, and clipped to ``[1, max_turns]``.
    """

    body: LogNormal
    max_turns: int
    """The RL recipe's step cap."""
    tail_probability: float = 0.0
    tail: LogNormal | None = None
    effort_exponent: float = 1.0

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if not 0 <= self.tail_probability <= 1:
            raise ValueError(f"tail_probability must be in [0, 1], got {self.tail_probability}")
        if self.tail_probability > 0 and self.tail is None:
            raise ValueError("a tail_probability > 0 needs a tail distribution")


@dataclass(frozen=True, slots=True)
class ToolModel:
    """One kind of tool call: how often the agent picks it and how long it runs."""

    name: str
    weight: float
    """Relative frequency among the workload's tool calls."""
    time_s: LogNormal
    max_time_s: float
    """Executor timeout: longer draws are cut here."""

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise ValueError(f"tool {self.name!r}: weight must be > 0, got {self.weight}")
        if self.max_time_s <= 0:
            raise ValueError(f"tool {self.name!r}: max_time_s must be > 0")


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Every distribution of one agentic workload; ``catalog`` cites each value's source."""

    name: str
    description: str
    prompt_tokens: LogNormal
    turns: TurnModel
    output_tokens: LogNormal
    """Tokens generated per turn (before the effort scaling and the caps)."""
    max_output_tokens_per_turn: int
    """The per-request max_tokens of the RL recipe."""
    max_response_tokens: int
    """Cap on all generated tokens of a trajectory; the rollout truncates it there."""
    tool_output_tokens: LogNormal
    max_tool_output_tokens: int
    """Observations are truncated to this many tokens before entering the context."""
    tools: tuple[ToolModel, ...]
    group_size: int
    """GRPO samples per prompt (default of ``generate``)."""
    # Assumption (no published split): prompt and sample factors of equal spread leave the
    # group explaining ~15-55% of the length variance, so "the prompt alone predicts length
    # poorly" (cal s.2, the paper's Fig. 5) while prompts still differ in difficulty.
    difficulty: LogNormal = LogNormal(1.0, 0.35)
    """Per-prompt factor shared by every sample of a group."""
    effort: LogNormal = LogNormal(1.0, 0.35)
    """Per-sample factor: exploration at high temperature and environment feedback."""
    output_effort_exponent: float = 0.5
    """Generation length per turn scales with ``(difficulty * effort) ** this`` (assumption:
    harder trajectories take more turns and, less strongly, longer ones)."""
    first_turn_factor: float = 1.0
    """The first generation (the plan) is this many times a later one."""

    def __post_init__(self) -> None:
        if not self.tools:
            raise ValueError(f"workload {self.name!r} needs at least one tool")
        if self.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {self.group_size}")
        if self.max_output_tokens_per_turn < 1 or self.max_response_tokens < 1:
            raise ValueError("token caps must be >= 1")
