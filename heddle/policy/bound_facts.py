"""What the makespan lower bound (``heddle.policy.lower_bound``) reads of a workload, step by
step, under a prompt-sharing mode: the decode tokens and the contexts they read, the tokens each
step must prefill and the context they attend to, and the prompt KV a trajectory may share.

Prompt sharing says what an engine may save on a prompt that several trajectories start from
(``PromptSharing``):

* ``none``: every trajectory prefills and holds its own copy of its prompt (the torch engine's
  per-trajectory prefix store).
* ``group``: the trajectories of one group with the same prompt length (a GRPO group: one
  non-empty ``group``) share it: it is prefilled at least once for the group and held once per
  worker (SGLang's radix cache). A trajectory of a group of ``n`` may find its prompt cached by
  a sibling, so its own first step prefills nothing of it; and of a batch's KV, its prompt takes
  at least ``P / n`` per member (at most ``n`` members share one copy).
* ``any``: prompts may come from any prefix cache, even one filled before the rollout: no
  prompt prefill counts, and a prompt may take no KV of its own (engine-agnostic).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

PromptSharing = Literal["none", "group", "any"]
PROMPT_SHARINGS: tuple[PromptSharing, ...] = ("none", "group", "any")


class StepShape(Protocol):
    @property
    def output_tokens(self) -> int: ...
    @property
    def tool_s(self) -> float: ...
    @property
    def tool_output_tokens(self) -> int: ...


class TrajectoryShape(Protocol):
    """What the bound reads of a trajectory (``heddle.traces.TraceTrajectory`` fits)."""

    @property
    def prompt_tokens(self) -> int: ...
    @property
    def steps(self) -> Sequence[StepShape]: ...
    @property
    def group(self) -> str:
        """Trajectories sampled from one prompt share it ("" for none)."""
        ...


@dataclass(frozen=True, slots=True)
class StepFacts:
    decode_tokens: int
    """``d = o - 1``: decode steps the step needs at least (the first token may come from
    prefill)."""
    context_tokens: int
    """``c``: the context at the step's start."""
    context_sum: float
    """Sum of the contexts the decode tokens read: ``d c + d (d - 1) / 2``."""
    prefill_tokens: int
    """New tokens of this step that the workload prefills at least once (a group's shared
    prompt counts at its first member only)."""
    solo_prefill_tokens: int
    """New tokens this trajectory must prefill itself before the step decodes."""
    cached_tokens: int
    """Context before the new tokens: what their prefill attends to besides themselves."""


@dataclass(frozen=True, slots=True)
class TrajectoryBoundFacts:
    steps: list[StepFacts]
    tool_s: float
    """Tool time of every step but the last (a trajectory ends with a generation)."""
    shared_prompt_tokens: float
    """``s``: prompt tokens whose KV other trajectories may hold for it: of a context of ``c``
    tokens it holds at least ``c - s`` in a batch's KV."""
    prompt_tokens: int

    @property
    def min_resident_tokens(self) -> float:
        """The least KV it holds while it decodes: its prompt less the shared part."""
        return self.prompt_tokens - self.shared_prompt_tokens


def workload_facts(
    trajectories: Sequence[TrajectoryShape], sharing: PromptSharing
) -> list[TrajectoryBoundFacts]:
    """The facts of every trajectory, in order; ``ValueError`` for negative counts or an
    unknown mode."""
    if sharing not in PROMPT_SHARINGS:
        raise ValueError(f"unknown prompt sharing {sharing!r}; choose one of {PROMPT_SHARINGS}")
    sizes = Counter(_prompt_key(t, index) for index, t in enumerate(trajectories))
    seen: set[object] = set()
    facts: list[TrajectoryBoundFacts] = []
    for index, trajectory in enumerate(trajectories):
        key = _prompt_key(trajectory, index)
        group_size = sizes[key] if sharing == "group" else 1
        is_first = key not in seen
        seen.add(key)
        facts.append(_trajectory_facts(trajectory, index, sharing, group_size, is_first))
    return facts


def _prompt_key(trajectory: TrajectoryShape, index: int) -> object:
    """Trajectories that share a prompt under ``group`` (a trace's own index: none)."""
    return (trajectory.group, trajectory.prompt_tokens) if trajectory.group else index


def _trajectory_facts(
    trajectory: TrajectoryShape,
    index: int,
    sharing: PromptSharing,
    group_size: int,
    is_first: bool,
) -> TrajectoryBoundFacts:
    prompt = trajectory.prompt_tokens
    if prompt < 0:
        raise ValueError(f"trajectory {index}: prompt_tokens must be >= 0")
    if sharing == "none":
        work_prompt, solo_prompt, shared = prompt, prompt, 0.0
    elif sharing == "any":
        work_prompt, solo_prompt, shared = 0, 0, float(prompt)
    else:
        work_prompt = prompt if is_first else 0
        solo_prompt = prompt if group_size == 1 else 0
        shared = prompt * (1.0 - 1.0 / group_size)
    steps: list[StepFacts] = []
    context, work_new, solo_new = prompt, work_prompt, solo_prompt
    cached = 0
    for number, step in enumerate(trajectory.steps):
        if step.output_tokens < 0 or step.tool_output_tokens < 0 or not step.tool_s >= 0.0:
            raise ValueError(f"trajectory {index} step {number}: counts and tool_s must be >= 0")
        decode = max(step.output_tokens - 1, 0)
        context_sum = decode * context + decode * (decode - 1) / 2
        steps.append(StepFacts(decode, context, context_sum, work_new, solo_new, cached))
        cached = context + step.output_tokens
        context = cached + step.tool_output_tokens
        work_new = solo_new = step.tool_output_tokens
    tool_s = math.fsum(step.tool_s for step in trajectory.steps[:-1])
    return TrajectoryBoundFacts(steps, tool_s, shared, prompt)
