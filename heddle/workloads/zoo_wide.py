"""The zoo's ``wide`` family: one parameter record whose ranges span every workload dimension of
issue 36's hunter (``heddle.experiments.hunt``), far past the realistic families' ranges
(``heddle.workloads.zoo_params``), so a search can reach the workloads where a scheduler loses.

Every field is drawn from its ``Range`` like the other families' (``zoo_ranges.draw_params``);
``to_shape`` turns a record into the same ``AgentWorkload`` and sampler. The dimensions:

* turns per trajectory 1-250: a lognormal body (median 1-60, sigma 0.05-1.5: light to heavy
  tails) cut at ``max_turns``, and a long-horizon mode (up to 30% of samples, more often on hard
  prompts: bimodal groups) of 10-250 turns; the prompts' difficulty spread sets how much a group
  shares its fate;
* output tokens per step 50-16k: a median of 50-4000 for later steps, a first step 0.25-8x that,
  and up to 15% of steps a long reasoning step of 4k-16k tokens (16k per-step cap);
* tools: mostly sub-second calls (median 0.05-1 s), rare test runs (up to 10% of calls) of
  30-300 s (median), and bursts (a call repeats the previous call's kind with probability up to
  0.8: runs of test runs). Up to 30% made the random draws mostly tool-bound: one trajectory's
  hour of test runs set every system's makespan, and every system tied;
* observations of 10-16k tokens per step (median 10-8000, capped at 1k-16k), contexts up to
  16k-128k tokens (Qwen3's native 40k to its 128k YaRN limit: the scaffold stops there);
* prompts of 100-20k tokens, groups of 1-16 samples.

Nothing here is calibrated: it is a search space, not a workload anyone runs (the realistic
families and their sources are in ``zoo_params``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from heddle.workloads.agent_shape import AgentWorkload, LongSteps, TurnTail
from heddle.workloads.distributions import LogNormal
from heddle.workloads.spec import ToolModel
from heddle.workloads.zoo_params import QWEN3_YARN_CONTEXT_TOKENS
from heddle.workloads.zoo_ranges import Range, int_range, log_range

MOST_TURNS = 250
MAX_OUTPUT_TOKENS_PER_STEP = 16384
LONG_STEP_TOKENS = LogNormal.from_range(4000, MAX_OUTPUT_TOKENS_PER_STEP)
TEST_TIMEOUT_S = 600.0
QUICK_TIMEOUT_S = 60.0


def _log_int_range(low: int, high: int) -> Range:
    return Range(low, high, is_log=True, is_integer=True)


@dataclass(frozen=True, slots=True)
class WideParams:
    """One workload of the hunter's space (field docs: the module's)."""

    group_size: int
    median_turns: float
    turn_sigma: float
    max_turns: int
    tail_share: float
    """Expected share of long-horizon samples (harder prompts more often)."""
    tail_min_turns: int
    tail_span: float
    """The long-horizon mode's turns are uniform on ``[tail_min_turns, tail_min_turns *
    tail_span]`` (at most ``MOST_TURNS``)."""
    difficulty_sigma: float
    """Spread of the per-prompt factor every sample of a group shares."""
    prompt_median_tokens: float
    output_median_tokens: float
    first_turn_factor: float
    long_step_share: float
    observation_median_tokens: float
    observation_p90_over_median: float
    max_observation_tokens: int
    quick_median_s: float
    quick_sigma: float
    test_share: float
    """Share of tool calls that are test runs (the rest are quick calls)."""
    test_median_s: float
    test_sigma: float
    tool_burst: float
    max_context_tokens: int

    RANGES: ClassVar[dict[str, Range]] = {
        "group_size": int_range(1, 16),
        "median_turns": log_range(1, 60),
        "turn_sigma": Range(0.05, 1.5),
        "max_turns": _log_int_range(1, MOST_TURNS),
        "tail_share": Range(0.0, 0.3),
        "tail_min_turns": _log_int_range(10, 200),
        "tail_span": Range(1.0, 2.5),
        "difficulty_sigma": Range(0.1, 1.0),
        "prompt_median_tokens": log_range(100, 20000),
        "output_median_tokens": log_range(50, 4000),
        "first_turn_factor": log_range(0.25, 8.0),
        "long_step_share": Range(0.0, 0.15),
        "observation_median_tokens": log_range(10, 8000),
        "observation_p90_over_median": Range(1.2, 4.0),
        "max_observation_tokens": _log_int_range(1024, 16384),
        "quick_median_s": log_range(0.05, 1.0),
        "quick_sigma": Range(0.3, 1.2),
        "test_share": Range(0.0, 0.1),
        "test_median_s": log_range(30, 300),
        "test_sigma": Range(0.3, 1.0),
        "tool_burst": Range(0.0, 0.8),
        "max_context_tokens": _log_int_range(16384, QWEN3_YARN_CONTEXT_TOKENS),
    }

    def to_shape(self, name: str) -> AgentWorkload:
        return AgentWorkload(
            name=name,
            group_size=self.group_size,
            prompt_tokens=LogNormal.from_median_p90(
                self.prompt_median_tokens, 2.0 * self.prompt_median_tokens
            ),
            turns=LogNormal(self.median_turns, self.turn_sigma),
            min_turns=1,
            max_turns=self.max_turns,
            output_tokens=LogNormal.from_median_p90(
                self.output_median_tokens, 13 / 7 * self.output_median_tokens
            ),
            max_output_tokens_per_turn=MAX_OUTPUT_TOKENS_PER_STEP,
            max_response_tokens=self.max_context_tokens,
            observation_tokens=LogNormal.from_median_p90(
                self.observation_median_tokens,
                self.observation_p90_over_median * self.observation_median_tokens,
            ),
            max_observation_tokens=self.max_observation_tokens,
            tools=self._tools(),
            max_context_tokens=self.max_context_tokens,
            tail=self._tail(),
            long_steps=LongSteps(self.long_step_share, LONG_STEP_TOKENS)
            if self.long_step_share > 0
            else None,
            first_turn_factor=self.first_turn_factor,
            difficulty=LogNormal(1.0, self.difficulty_sigma),
            tool_burst=self.tool_burst,
        )

    def _tools(self) -> tuple[ToolModel, ...]:
        quick = ToolModel(
            "quick",
            1.0 - self.test_share,
            LogNormal(self.quick_median_s, self.quick_sigma),
            QUICK_TIMEOUT_S,
        )
        if self.test_share <= 0:
            return (quick,)
        test = ToolModel(
            "tests", self.test_share, LogNormal(self.test_median_s, self.test_sigma), TEST_TIMEOUT_S
        )
        return (quick, test)

    def _tail(self) -> TurnTail | None:
        if self.tail_share <= 0:
            return None
        most = max(
            self.tail_min_turns, min(MOST_TURNS, round(self.tail_min_turns * self.tail_span))
        )
        return TurnTail(self.tail_share, self.tail_min_turns, most)
