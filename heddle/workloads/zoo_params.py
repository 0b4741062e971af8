"""The zoo's parameter families: typed, frozen parameter records whose fields are drawn from
documented ranges, and how each record becomes an ``AgentWorkload``.

Every drawn field has a ``Range`` in its class's ``RANGES``; ``draw_params(cls, rng)`` draws all
of them from a seeded ``random.Random`` (``zoo_ranges``), so a test can check any record against
its ranges.
Sources: "cal s.2" is docs/calibration.md section 2 (agentic trajectory shapes); "assumption" marks
a
value nothing published pins down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from heddle.workloads.agent_shape import AgentWorkload, LongSteps, TurnTail
from heddle.workloads.distributions import LogNormal
from heddle.workloads.spec import ToolModel
from heddle.workloads.zoo_ranges import Range, int_range, log_range

# Qwen3's context: 32k native, 128k with YaRN (the Qwen3 model cards); agent scaffolds stop there.
QWEN3_YARN_CONTEXT_TOKENS = 131072
QWEN3_DEFAULT_CONTEXT_TOKENS = 40960  # max_position_embeddings of the Qwen3 configs


def _qwen3_shaped(median_tokens: float) -> LogNormal:
    """The catalog's Qwen3 tail shape (cal s.2: p90/median = 13/7) around ``median_tokens``."""
    return LogNormal.from_median_p90(median_tokens, 13 / 7 * median_tokens)


def _spread(median: float, p90_over_median: float) -> LogNormal:
    return LogNormal.from_median_p90(median, p90_over_median * median)


@dataclass(frozen=True, slots=True)
class SweParams:
    """SWE/coding agent with shell actions and test runs; 10-150 turns, tens of k of context."""

    group_size: int
    median_turns: float
    turn_sigma: float
    max_turns: int
    prompt_median_tokens: float
    output_median_tokens: float
    observation_median_tokens: float
    test_share: float
    """Share of tool calls that run the test suite (the rest are shell actions)."""
    test_median_s: float
    test_sigma: float
    test_timeout_s: float
    shell_median_s: float
    max_context_tokens: int

    MIN_TURNS: ClassVar[int] = 10  # assumption: an agent explores, edits and tests at least once
    RANGES: ClassVar[dict[str, Range]] = {
        "group_size": int_range(4, 16),  # cal s.2: GRPO 8-16 (DeepSWE 8); assumption down to 4
        "median_turns": log_range(15, 60),  # cal s.2: SWE datasets average 16-64 turns
        "turn_sigma": Range(0.4, 0.8),  # cal s.2: long tails (max/mean 2-13x); assumption
        "max_turns": int_range(50, 150),  # cal s.2: DeepSWE caps at 50; SWE-smith max 151
        "prompt_median_tokens": log_range(2000, 6000),  # assumption: tool schemas + issue
        "output_median_tokens": log_range(200, 600),  # assumption: think + action per turn
        # assumption: file views and test logs, median 200-800 with a 4x p90 (long logs)
        "observation_median_tokens": log_range(200, 800),
        "test_share": Range(0.1, 0.35),  # assumption
        "test_median_s": log_range(30, 180),  # cal s.2: test runs up to minutes (assumption)
        "test_sigma": Range(0.6, 1.2),  # assumption: heavy tail, p95 3-7x the median
        "test_timeout_s": log_range(600, 1800),  # assumption: harness timeouts 10-30 min
        "shell_median_s": log_range(1, 4),  # cal s.2: shell actions 0.5-10 s (assumption)
        "max_context_tokens": int_range(65536, QWEN3_YARN_CONTEXT_TOKENS),  # assumption
    }

    def to_shape(self, name: str) -> AgentWorkload:
        return AgentWorkload(
            name=name,
            group_size=self.group_size,
            prompt_tokens=_spread(self.prompt_median_tokens, 2.0),
            turns=LogNormal(self.median_turns, self.turn_sigma),
            min_turns=self.MIN_TURNS,
            max_turns=self.max_turns,
            output_tokens=_qwen3_shaped(self.output_median_tokens),
            max_output_tokens_per_turn=8192,  # assumption: the recipe's per-request max_tokens
            max_response_tokens=self.max_context_tokens,
            observation_tokens=_spread(self.observation_median_tokens, 4.0),
            max_observation_tokens=8192,  # assumption: scaffolds truncate long observations
            tools=(
                ToolModel("shell", 1 - self.test_share, LogNormal(self.shell_median_s, 0.7), 120),
                ToolModel(
                    "tests",
                    self.test_share,
                    LogNormal(self.test_median_s, self.test_sigma),
                    self.test_timeout_s,
                ),
            ),
            max_context_tokens=self.max_context_tokens,
            first_turn_factor=2.0,  # as the catalog's coding workload (assumption)
            output_effort_exponent=0.75,
        )


@dataclass(frozen=True, slots=True)
class SearchParams:
    """Search agent: mostly 2-6 short turns, a small share of 40-100-turn samples (cal s.2:
    Search-R1 takes 2-4 turns; ASearcher's tail makes >40 tool calls, up to 128 turns)."""

    group_size: int
    median_turns: float
    tail_share: float
    """Expected share of long-horizon samples (harder prompts more often)."""
    prompt_median_tokens: float
    output_median_tokens: float
    observation_median_tokens: float
    search_median_s: float
    search_sigma: float

    MIN_TURNS: ClassVar[int] = 2
    MAX_TURNS: ClassVar[int] = 6
    TAIL_MIN_TURNS: ClassVar[int] = 40
    TAIL_MAX_TURNS: ClassVar[int] = 100
    RANGES: ClassVar[dict[str, Range]] = {
        "group_size": int_range(4, 16),  # cal s.2: GRPO groups of 8-16; assumption down to 4
        "median_turns": Range(2.5, 4.5),  # cal s.2: Search-R1 2-4 turns
        "tail_share": Range(0.01, 0.05),  # assumption (the lost case: ~3%)
        "prompt_median_tokens": log_range(150, 500),  # assumption: question + template
        "output_median_tokens": log_range(200, 600),  # cal s.2: Search-R1 ~500 per turn
        "observation_median_tokens": log_range(200, 450),  # cal s.2: ~500-token observations
        "search_median_s": log_range(0.2, 1.0),  # cal s.2: search 0.1-2 s (assumption)
        "search_sigma": Range(0.4, 0.9),  # assumption
    }

    def to_shape(self, name: str) -> AgentWorkload:
        return AgentWorkload(
            name=name,
            group_size=self.group_size,
            prompt_tokens=_spread(self.prompt_median_tokens, 1.8),
            turns=LogNormal(self.median_turns, 0.25),
            min_turns=self.MIN_TURNS,
            max_turns=self.MAX_TURNS,
            output_tokens=_qwen3_shaped(self.output_median_tokens),
            max_output_tokens_per_turn=1024,  # as the catalog's search workload
            max_response_tokens=QWEN3_YARN_CONTEXT_TOKENS,
            observation_tokens=_spread(self.observation_median_tokens, 1.5),
            max_observation_tokens=500,  # cal s.2: Search-R1 truncates observations at 500
            tools=(
                ToolModel("search", 1.0, LogNormal(self.search_median_s, self.search_sigma), 30),
            ),
            max_context_tokens=QWEN3_YARN_CONTEXT_TOKENS,
            tail=TurnTail(self.tail_share, self.TAIL_MIN_TURNS, self.TAIL_MAX_TURNS),
            turn_effort_exponent=0.5,
        )


@dataclass(frozen=True, slots=True)
class MathParams:
    """Math agent with a python tool (ReTool-like): a few turns, sub-second to few-second code
    runs, and a long tail of generation lengths with some ~16k-token reasoning steps."""

    group_size: int
    median_turns: float
    prompt_median_tokens: float
    output_median_tokens: float
    first_turn_factor: float
    long_step_share: float
    """Share of turns that are a long reasoning step (median 10k tokens, cut at 16k)."""
    observation_median_tokens: float
    python_median_s: float
    python_sigma: float
    max_response_tokens: int

    MAX_TURNS: ClassVar[int] = 16  # cal s.2: verl ReTool, max 16 turns
    MAX_OUTPUT_TOKENS_PER_TURN: ClassVar[int] = 16384
    RANGES: ClassVar[dict[str, Range]] = {
        "group_size": int_range(4, 16),  # cal s.2: ReTool samples 16; assumption down to 4
        "median_turns": Range(1.5, 4.0),  # assumption: a few code calls per solution
        "prompt_median_tokens": log_range(200, 800),  # assumption: problem + template
        "output_median_tokens": log_range(300, 1200),  # assumption: reasoning between calls
        "first_turn_factor": Range(1.5, 3.0),  # the catalog's 2.5, spread (assumption)
        "long_step_share": Range(0.02, 0.10),  # assumption
        "observation_median_tokens": log_range(50, 300),  # assumption: short stdout
        "python_median_s": log_range(0.2, 1.5),  # cal s.2: python sandbox 0.1-5 s
        "python_sigma": Range(0.4, 0.8),  # assumption: p95 at most ~5 s
        "max_response_tokens": int_range(16384, 32768),  # cal s.2: ReTool 16k; assumption 32k
    }

    def to_shape(self, name: str) -> AgentWorkload:
        return AgentWorkload(
            name=name,
            group_size=self.group_size,
            prompt_tokens=_spread(self.prompt_median_tokens, 2.0),
            turns=LogNormal(self.median_turns, 0.5),
            min_turns=1,
            max_turns=self.MAX_TURNS,
            output_tokens=_qwen3_shaped(self.output_median_tokens),
            max_output_tokens_per_turn=self.MAX_OUTPUT_TOKENS_PER_TURN,
            max_response_tokens=self.max_response_tokens,
            observation_tokens=_spread(self.observation_median_tokens, 4.0),
            max_observation_tokens=1024,  # assumption: the sandbox caps captured output
            tools=(
                ToolModel("python", 1.0, LogNormal(self.python_median_s, self.python_sigma), 30),
            ),
            max_context_tokens=QWEN3_DEFAULT_CONTEXT_TOKENS,
            long_steps=LongSteps(self.long_step_share, LogNormal.from_range(6000, 16384)),
            first_turn_factor=self.first_turn_factor,
        )


@dataclass(frozen=True, slots=True)
class WebParams:
    """Web browsing agent: page dumps of several k tokens per observation, moderate turns.
    Assumption throughout: accessibility-tree or text dumps of pages (WebArena/BrowserGym-style
    scaffolds) run to thousands of tokens; nothing in cal s.2 measures them."""

    group_size: int
    median_turns: float
    max_turns: int
    prompt_median_tokens: float
    output_median_tokens: float
    observation_median_tokens: float
    max_observation_tokens: int
    browse_median_s: float
    browse_sigma: float

    MIN_TURNS: ClassVar[int] = 2
    RANGES: ClassVar[dict[str, Range]] = {
        "group_size": int_range(4, 16),
        "median_turns": log_range(5, 20),
        "max_turns": int_range(20, 50),
        "prompt_median_tokens": log_range(500, 2000),
        "output_median_tokens": log_range(100, 400),
        "observation_median_tokens": log_range(2000, 8000),
        "max_observation_tokens": int_range(8192, 16384),
        "browse_median_s": log_range(1, 6),  # page load, render and dump
        "browse_sigma": Range(0.5, 1.0),
    }

    def to_shape(self, name: str) -> AgentWorkload:
        return AgentWorkload(
            name=name,
            group_size=self.group_size,
            prompt_tokens=_spread(self.prompt_median_tokens, 1.8),
            turns=LogNormal(self.median_turns, 0.5),
            min_turns=self.MIN_TURNS,
            max_turns=self.max_turns,
            output_tokens=_qwen3_shaped(self.output_median_tokens),
            max_output_tokens_per_turn=4096,
            max_response_tokens=QWEN3_YARN_CONTEXT_TOKENS,
            observation_tokens=_spread(self.observation_median_tokens, 1.6),
            max_observation_tokens=self.max_observation_tokens,
            tools=(
                ToolModel("browse", 1.0, LogNormal(self.browse_median_s, self.browse_sigma), 60),
            ),
            max_context_tokens=QWEN3_YARN_CONTEXT_TOKENS,
            turn_effort_exponent=0.75,
        )
