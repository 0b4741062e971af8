"""The features the online predictor reads from a trajectory in flight (``features_of``).

From the trajectory itself: prompt tokens, steps completed, tokens generated so far (total, first
step, last step, mean per step), tool observation tokens and tool seconds so far (total and per
returned call).

From completed trajectories, two kinds of *survival* knowledge, because agentic lengths are
heavy-tailed: a trajectory that has already run ``k`` steps is more likely long than one that has
just started (the expected remaining steps of a long-tailed distribution grow with the steps
survived), and a linear model of the steps so far cannot express that:

- ``Survival``: the step counts of every completed trajectory, and the expected remaining steps
  of one still running after ``k``: ``E[N - k | N > k]``;
- ``GroupStats``: the completed lengths and step counts of the trajectory's group siblings (same
  prompt: GRPO samples, and the same prompt in earlier rollouts), which the paper's Fig. 5 shows
  to be informative but noisy, with the same conditional expectation over the siblings alone.

Everything is ``log1p`` of a count or a duration, so features are O(1..10).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from heddle.policy.prediction.base import Progress, returned_tool_calls

FEATURE_NAMES = (
    "bias",
    "log_prompt_tokens",
    "num_steps",
    "log_num_steps",
    "log_output_tokens",
    "log_first_output_tokens",
    "log_last_output_tokens",
    "log_mean_step_tokens",
    "log_tool_output_tokens",
    "log_tool_s",
    "has_siblings",
    "log_sibling_mean_tokens",
    "log_sibling_max_tokens",
    "log_survival_remaining_steps",
    "log_sibling_mean_steps",
    "log_sibling_survival_remaining_steps",
    "log_mean_tool_call_s",
)
NUM_FEATURES = len(FEATURE_NAMES)


@dataclass(slots=True)
class Survival:
    """Step counts of completed trajectories; ``remaining_steps(k)`` is ``E[N - k | N > k]``
    (1 when none went past ``k``: a running trajectory has at least one more step)."""

    counts: list[int] = field(default_factory=list)
    """``counts[n]``: completed trajectories of ``n`` steps."""
    _tail_count: list[int] = field(default_factory=list, init=False, repr=False)
    _tail_steps: list[int] = field(default_factory=list, init=False, repr=False)

    def add(self, num_steps: int) -> None:
        while len(self.counts) <= num_steps:
            self.counts.append(0)
        self.counts[num_steps] += 1
        self._tail_count.clear()

    def remaining_steps(self, num_steps: int) -> float:
        if not self._tail_count:
            self._rebuild()
        if num_steps + 1 >= len(self._tail_count):
            return 1.0
        surviving = self._tail_count[num_steps + 1]
        if surviving == 0:
            return 1.0
        return self._tail_steps[num_steps + 1] / surviving - num_steps

    def _rebuild(self) -> None:
        """Suffix sums: trajectories with more than ``k`` steps and their total steps."""
        size = len(self.counts)
        self._tail_count = [0] * (size + 1)
        self._tail_steps = [0] * (size + 1)
        for n in range(size - 1, -1, -1):
            self._tail_count[n] = self._tail_count[n + 1] + self.counts[n]
            self._tail_steps[n] = self._tail_steps[n + 1] + n * self.counts[n]


@dataclass(slots=True)
class GroupStats:
    """The completed siblings of one group: their total tokens and (sorted) step counts."""

    count: int = 0
    total_tokens: float = 0.0
    max_tokens: float = 0.0
    step_counts: list[int] = field(default_factory=list)

    def add(self, total_tokens: float, num_steps: int) -> None:
        self.count += 1
        self.total_tokens += total_tokens
        self.max_tokens = max(self.max_tokens, total_tokens)
        self.step_counts.insert(bisect_right(self.step_counts, num_steps), num_steps)

    @property
    def mean_tokens(self) -> float:
        return self.total_tokens / self.count if self.count else 0.0

    @property
    def mean_steps(self) -> float:
        return sum(self.step_counts) / len(self.step_counts) if self.step_counts else 0.0

    def remaining_steps(self, num_steps: int) -> float:
        """``E[N - k | N > k]`` over the siblings (0 when none went past ``k``)."""
        longer = self.step_counts[bisect_right(self.step_counts, num_steps) :]
        return sum(longer) / len(longer) - num_steps if longer else 0.0


def features_of(
    progress: Progress, siblings: GroupStats | None, survival: Survival | None = None
) -> np.ndarray:
    """The regression input for a trajectory in flight (see ``FEATURE_NAMES``)."""
    steps = progress.num_steps
    mean_step = progress.output_tokens / steps if steps else 0.0
    calls = returned_tool_calls(steps)
    mean_call_s = max(0.0, progress.tool_s) / calls if calls else 0.0
    known = siblings if siblings is not None and siblings.count > 0 else None
    return np.array(
        (
            1.0,
            math.log1p(progress.prompt_tokens),
            float(steps),
            math.log1p(steps),
            math.log1p(progress.output_tokens),
            math.log1p(progress.first_output_tokens),
            math.log1p(progress.last_output_tokens),
            math.log1p(mean_step),
            math.log1p(progress.tool_output_tokens),
            math.log1p(max(0.0, progress.tool_s)),
            1.0 if known else 0.0,
            math.log1p(known.mean_tokens) if known else 0.0,
            math.log1p(known.max_tokens) if known else 0.0,
            math.log1p(survival.remaining_steps(steps)) if survival else 0.0,
            math.log1p(known.mean_steps) if known else 0.0,
            math.log1p(known.remaining_steps(steps)) if known else 0.0,
            math.log1p(mean_call_s),
        )
    )
