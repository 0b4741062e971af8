"""One concrete agent workload shape and its sampler: what every zoo family
(``heddle.workloads.zoo``) turns its drawn parameters into.

``AgentWorkload`` differs from the catalog's ``WorkloadSpec`` in what the zoo needs to vary: a floor
on the number of turns (SWE agents rarely stop before ~10), a long-horizon tail drawn uniformly
over a stated turn range (search agents' 40-100-turn tail), occasional very long reasoning steps
(math agents' 16k-token steps), and the scaffold's context limit, which ends a trajectory.

Sampling follows ``heddle.workloads.generator``: prompt by prompt, one difficulty and one prompt
length per GRPO group, then ``group_size`` samples, each with its own effort factor; two numpy
generators seeded from ``seed`` (prompts) and ``(seed, epoch)`` (samples), so another ``epoch``
re-samples the same prompts: the previous training step that learning predictors fit on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heddle.traces import TraceStep, TraceTrajectory
from heddle.workloads.distributions import LogNormal
from heddle.workloads.generator import seeded_rngs
from heddle.workloads.spec import ToolModel


@dataclass(frozen=True, slots=True)
class TurnTail:
    """Long-horizon samples: with ``probability`` (times the prompt's difficulty over its mean,
    so ``probability`` is the expected share) a sample takes a number of turns drawn uniformly
    from ``[min_turns, max_turns]``."""

    probability: float
    min_turns: int
    max_turns: int

    def __post_init__(self) -> None:
        if not 0 <= self.probability <= 1:
            raise ValueError(f"tail probability must be in [0, 1], got {self.probability}")
        if not 1 <= self.min_turns <= self.max_turns:
            raise ValueError(f"need 1 <= min_turns <= max_turns, got {self}")


@dataclass(frozen=True, slots=True)
class LongSteps:
    """Occasional very long generations: each turn, with ``probability``, draws its length from
    ``tokens`` instead of the ordinary per-turn distribution."""

    probability: float
    tokens: LogNormal


@dataclass(frozen=True, slots=True)
class AgentWorkload:
    """Every distribution and cap of one concrete workload (one parameter draw of a family)."""

    name: str
    """Prefix of group and trajectory ids."""
    group_size: int
    """GRPO samples per prompt."""
    prompt_tokens: LogNormal
    turns: LogNormal
    """Ordinary samples' turns, scaled by ``(difficulty * effort) ** turn_effort_exponent`` and
    clipped to ``[min_turns, max_turns]``."""
    min_turns: int
    max_turns: int
    output_tokens: LogNormal
    """Tokens generated per ordinary turn (before the effort scaling and the caps)."""
    max_output_tokens_per_turn: int
    max_response_tokens: int
    """Cap on all generated tokens of a trajectory; the turn that reaches it ends it."""
    observation_tokens: LogNormal
    max_observation_tokens: int
    tools: tuple[ToolModel, ...]
    max_context_tokens: int
    """The scaffold's context limit: a generation that would pass it is cut there and ends the
    trajectory (agents stop when their context is full)."""
    tail: TurnTail | None = None
    long_steps: LongSteps | None = None
    first_turn_factor: float = 1.0
    turn_effort_exponent: float = 1.0
    output_effort_exponent: float = 0.5
    difficulty: LogNormal = LogNormal(1.0, 0.35)
    """Per-prompt factor (the catalog's assumption, ``heddle.workloads.spec``)."""
    effort: LogNormal = LogNormal(1.0, 0.35)
    """Per-sample factor."""
    tool_burst: float = 0.0
    """Probability that a tool call repeats the previous call's kind instead of drawing one by
    weight: runs of test-suite calls (a fix-and-retest loop) or of quick calls. The share of
    each kind stays its weight; 0 draws every call independently (and no extra numbers)."""

    @property
    def most_turns(self) -> int:
        """The most turns any sample can take (ordinary or long-horizon)."""
        return max(self.max_turns, self.tail.max_turns if self.tail else 0)

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {self.group_size}")
        if not 1 <= self.min_turns <= self.max_turns:
            raise ValueError(
                f"need 1 <= min_turns <= max_turns, got {self.min_turns}, {self.max_turns}"
            )
        if not self.tools:
            raise ValueError(f"shape {self.name!r} needs at least one tool")
        if min(self.max_output_tokens_per_turn, self.max_response_tokens) < 1:
            raise ValueError("token caps must be >= 1")
        if not 0 <= self.tool_burst < 1:
            raise ValueError(f"tool_burst must be in [0, 1), got {self.tool_burst}")


def sample_shape(
    shape: AgentWorkload, num_trajectories: int, seed: int, epoch: int = 0
) -> list[TraceTrajectory]:
    """``num_trajectories`` trajectories of ``shape`` in groups of ``shape.group_size`` (the last
    group may be cut short). Same arguments, same trace; another ``epoch``, same prompts."""
    prompt_rng, sample_rng = seeded_rngs(num_trajectories, seed, epoch)
    trajectories: list[TraceTrajectory] = []
    prompt_index = 0
    while len(trajectories) < num_trajectories:
        group = f"{shape.name}-p{prompt_index:05d}"
        difficulty = shape.difficulty.sample_one(prompt_rng)
        prompt_tokens = max(1, round(shape.prompt_tokens.sample_one(prompt_rng)))
        for sample in range(min(shape.group_size, num_trajectories - len(trajectories))):
            steps = _draw_steps(shape, sample_rng, difficulty, prompt_tokens)
            trajectories.append(
                TraceTrajectory(
                    id=f"{group}-s{sample:02d}",
                    group=group,
                    prompt_tokens=prompt_tokens,
                    steps=steps,
                )
            )
        prompt_index += 1
    return trajectories


def _draw_steps(
    shape: AgentWorkload, rng: np.random.Generator, difficulty: float, prompt_tokens: int
) -> list[TraceStep]:
    factor = difficulty * shape.effort.sample_one(rng)
    num_turns = _draw_num_turns(shape, rng, difficulty, factor)
    outputs = shape.output_tokens.sample(rng, num_turns, factor**shape.output_effort_exponent)
    outputs[0] *= shape.first_turn_factor
    if shape.long_steps is not None:
        is_long = rng.random(num_turns) < shape.long_steps.probability
        outputs = np.where(is_long, shape.long_steps.tokens.sample(rng, num_turns), outputs)
    outputs = np.clip(np.rint(outputs), 1, shape.max_output_tokens_per_turn).astype(np.int64)
    observations = np.clip(
        np.rint(shape.observation_tokens.sample(rng, num_turns)), 1, shape.max_observation_tokens
    ).astype(np.int64)
    tool_times_s = _draw_tool_times(shape.tools, rng, num_turns, shape.tool_burst)
    return _assemble(shape, prompt_tokens, outputs, observations, tool_times_s)


def _draw_num_turns(
    shape: AgentWorkload, rng: np.random.Generator, difficulty: float, factor: float
) -> int:
    tail = shape.tail
    # Harder prompts go long more often; dividing by the mean difficulty keeps the expected share
    # of long-horizon samples at ``tail.probability``.
    if tail is not None and rng.random() < tail.probability * difficulty / shape.difficulty.mean:
        return int(rng.integers(tail.min_turns, tail.max_turns + 1))
    drawn = shape.turns.sample_one(rng, factor**shape.turn_effort_exponent)
    return int(min(shape.max_turns, max(shape.min_turns, round(drawn))))


def _draw_tool_times(
    tools: tuple[ToolModel, ...], rng: np.random.Generator, num_calls: int, burst: float = 0.0
) -> np.ndarray:
    """One tool kind per call (by weight; with probability ``burst`` the previous call's kind),
    then its lognormal time (to 0.1 ms), cut at its timeout."""
    weights = np.array([tool.weight for tool in tools])
    kinds = rng.choice(len(tools), size=num_calls, p=weights / weights.sum())
    if burst > 0:
        # Repeating the previous kind keeps each kind's stationary share at its weight.
        repeats = rng.random(num_calls) < burst
        for index in range(1, num_calls):
            if repeats[index]:
                kinds[index] = kinds[index - 1]
    medians = np.array([tool.time_s.median for tool in tools])[kinds]
    sigmas = np.array([tool.time_s.sigma for tool in tools])[kinds]
    timeouts = np.array([tool.max_time_s for tool in tools])[kinds]
    times = np.round(medians * np.exp(sigmas * rng.standard_normal(num_calls)), 4)
    return np.minimum(times, timeouts)


def _assemble(
    shape: AgentWorkload,
    prompt_tokens: int,
    outputs: np.ndarray,
    observations: np.ndarray,
    tool_times_s: np.ndarray,
) -> list[TraceStep]:
    """Steps until the turns run out or a cap binds (response or context); the step that reaches
    a cap is cut to it and ends the trajectory. Every step but the last calls a tool."""
    steps: list[TraceStep] = []
    context, response = prompt_tokens, 0
    for index in range(len(outputs)):
        room = min(shape.max_response_tokens - response, shape.max_context_tokens - context)
        output = int(min(outputs[index], max(1, room)))
        is_last = index == len(outputs) - 1 or output >= room
        context += output
        response += output
        observation = int(observations[index])
        if not is_last and context + observation >= shape.max_context_tokens:
            is_last = True  # the observation would not fit: the scaffold stops here
        if is_last:
            steps.append(TraceStep(output_tokens=output))
            break
        steps.append(
            TraceStep(
                output_tokens=output,
                tool_s=float(tool_times_s[index]),
                tool_output_tokens=observation,
            )
        )
        context += observation
    return steps
