"""Draw trajectories of a ``WorkloadSpec`` into the trace format (``heddle.traces``).

Trajectories come prompt by prompt: one difficulty and one prompt length per GRPO group, then
``group_size`` samples. Prompts and samples draw, in a fixed order, from two ``numpy`` generators
seeded from ``seed``: the same ``(spec, seed, epoch)`` gives the same trace, and a shorter trace
is a prefix of a longer one (except that the last group of the shorter one may be cut short).
Another ``epoch`` re-samples the same prompts (same groups, difficulties and prompt lengths, new
samples), as an RL run revisits its dataset: the history that prompt-based predictors learn from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heddle.traces import TraceStep, TraceTrajectory
from heddle.workloads.spec import ToolModel, TurnModel, WorkloadSpec


def seeded_rngs(
    num_trajectories: int, seed: int, epoch: int
) -> tuple[np.random.Generator, np.random.Generator]:
    """The prompt and sample generators of a synthetic trace (``ValueError`` for bad sizes):
    prompts depend on ``seed`` only, samples on ``seed`` and ``epoch``, so another epoch
    re-samples the same prompts."""
    if num_trajectories < 1:
        raise ValueError(f"num_trajectories must be >= 1, got {num_trajectories}")
    if seed < 0 or epoch < 0:
        raise ValueError(f"seed and epoch must be >= 0, got seed={seed}, epoch={epoch}")
    prompt_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
    sample_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, epoch)))
    return prompt_rng, sample_rng


def generate_from_spec(
    spec: WorkloadSpec,
    num_trajectories: int,
    seed: int,
    group_size: int | None = None,
    epoch: int = 0,
) -> list[TraceTrajectory]:
    """``num_trajectories`` trajectories in groups of ``group_size`` (default: the spec's);
    ``epoch`` re-samples the same prompts."""
    size = spec.group_size if group_size is None else group_size
    if size < 1:
        raise ValueError(f"group_size must be >= 1, got {size}")
    prompt_rng, sample_rng = seeded_rngs(num_trajectories, seed, epoch)
    trajectories: list[TraceTrajectory] = []
    prompt_index = 0
    while len(trajectories) < num_trajectories:
        num_samples = min(size, num_trajectories - len(trajectories))
        prompt = _draw_prompt(spec, prompt_rng, prompt_index)
        trajectories.extend(_draw_group(spec, sample_rng, prompt, num_samples))
        prompt_index += 1
    return trajectories


@dataclass(frozen=True, slots=True)
class _Prompt:
    group: str
    difficulty: float
    prompt_tokens: int


def _draw_prompt(spec: WorkloadSpec, rng: np.random.Generator, prompt_index: int) -> _Prompt:
    return _Prompt(
        group=f"{spec.name}-p{prompt_index:05d}",
        difficulty=spec.difficulty.sample_one(rng),
        prompt_tokens=max(1, round(spec.prompt_tokens.sample_one(rng))),
    )


def _draw_group(
    spec: WorkloadSpec, rng: np.random.Generator, prompt: _Prompt, num_samples: int
) -> list[TraceTrajectory]:
    return [
        TraceTrajectory(
            id=f"{prompt.group}-s{sample:02d}",
            group=prompt.group,
            prompt_tokens=prompt.prompt_tokens,
            steps=_draw_steps(spec, rng, prompt.difficulty),
        )
        for sample in range(num_samples)
    ]


def _draw_steps(spec: WorkloadSpec, rng: np.random.Generator, difficulty: float) -> list[TraceStep]:
    factor = difficulty * spec.effort.sample_one(rng)
    num_turns = _draw_num_turns(spec.turns, rng, difficulty, factor)
    outputs = spec.output_tokens.sample(rng, num_turns, factor**spec.output_effort_exponent)
    outputs[0] *= spec.first_turn_factor
    outputs = np.clip(np.rint(outputs), 1, spec.max_output_tokens_per_turn).astype(np.int64)
    observations = np.clip(
        np.rint(spec.tool_output_tokens.sample(rng, num_turns)), 1, spec.max_tool_output_tokens
    ).astype(np.int64)
    tool_times_s = _draw_tool_times(spec.tools, rng, num_turns)
    return _assemble_steps(outputs, observations, tool_times_s, spec.max_response_tokens)


def _draw_num_turns(
    turns: TurnModel, rng: np.random.Generator, difficulty: float, factor: float
) -> int:
    """Ordinary or long-horizon turn count; harder prompts go long-horizon more often."""
    distribution = turns.body
    if turns.tail is not None and rng.random() < min(1.0, turns.tail_probability * difficulty):
        distribution = turns.tail
    drawn = distribution.sample_one(rng, factor**turns.effort_exponent)
    return int(min(turns.max_turns, max(1, round(drawn))))


def _draw_tool_times(
    tools: tuple[ToolModel, ...], rng: np.random.Generator, num_calls: int
) -> np.ndarray:
    """One tool kind per call (by weight), then its lognormal time, cut at its timeout."""
    weights = np.array([tool.weight for tool in tools])
    kinds = rng.choice(len(tools), size=num_calls, p=weights / weights.sum())
    medians = np.array([tool.time_s.median for tool in tools])[kinds]
    sigmas = np.array([tool.time_s.sigma for tool in tools])[kinds]
    timeouts = np.array([tool.max_time_s for tool in tools])[kinds]
    times = medians * np.exp(sigmas * rng.standard_normal(num_calls))
    return np.minimum(times, timeouts)


def _assemble_steps(
    outputs: np.ndarray, observations: np.ndarray, tool_times_s: np.ndarray, max_response: int
) -> list[TraceStep]:
    """Steps up to the response cap: the turn that reaches it is cut and ends the trajectory.

    Every step but the last calls a tool; the last one's tool fields stay zero.
    """
    cumulative = np.cumsum(outputs)
    over = np.flatnonzero(cumulative >= max_response)
    num_steps = len(outputs) if over.size == 0 else int(over[0]) + 1
    kept = outputs[:num_steps].copy()
    kept[-1] -= max(0, int(cumulative[num_steps - 1]) - max_response)
    steps = [
        TraceStep(
            output_tokens=int(kept[i]),
            tool_s=round(float(tool_times_s[i]), 4),
            tool_output_tokens=int(observations[i]),
        )
        for i in range(num_steps - 1)
    ]
    steps.append(TraceStep(output_tokens=int(kept[-1])))
    return steps
