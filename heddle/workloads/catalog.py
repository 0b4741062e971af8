"""The built-in workloads: coding (SWE-style), search (Search-R1 / ASearcher) and math (ReTool).

Every value cites its source in ``docs/calibration.md`` section 2 ("cal s.2") or says
"assumption" where nothing was published. "Qwen3 tail shape" means the generation-length tail
measured by ML.ENERGY for Qwen3 reasoning (median ~7k, p90 ~13k, p99 ~19-22k tokens): a lognormal
with p90/median = 13/7 (sigma 0.48) also reproduces that p99 (7k * e^(2.33*0.48) = 21.5k), so
per-turn lengths keep that shape around each workload's own median.
"""

from __future__ import annotations

from heddle.workloads.distributions import LogNormal
from heddle.workloads.spec import ToolModel, TurnModel, WorkloadSpec

_QWEN3_P90_OVER_MEDIAN = 13 / 7  # cal s.2: Qwen3 reasoning, p90 ~13k over median ~7k.


def _qwen3_shaped(median_tokens: float) -> LogNormal:
    return LogNormal.from_median_p90(median_tokens, median_tokens * _QWEN3_P90_OVER_MEDIAN)


CODING = WorkloadSpec(
    name="coding",
    description="SWE-style coding agent: shell actions and test runs on a repository",
    # assumption: system prompt with tool schemas (~2k) plus an issue; long issues double it.
    prompt_tokens=LogNormal.from_median_p90(3000, 6000),
    turns=TurnModel(
        # cal s.2: SWE datasets average 16-64 turns (R2E-Gym 16.1, SWE-Gym 18.9, SWE-smith 30.2,
        # SWE-rebench 64.3) with long tails; a median of 18 spread by difficulty and effort
        # gives a mean of ~22 under the cap.
        body=LogNormal(18, 0.45),
        max_turns=50,  # cal s.2: DeepSWE caps a trajectory at 50 steps.
    ),
    output_tokens=_qwen3_shaped(250),  # assumption: ~250-token think + action per turn.
    first_turn_factor=2.0,  # assumption: the first turn plans and explores the repository.
    # assumption: hard trajectories also think longer per turn; with 0.75 about 1% reach the
    # 32k response cap and max/median of output tokens is ~5x (the paper: > 4x).
    output_effort_exponent=0.75,
    max_output_tokens_per_turn=8192,  # assumption: per-request max_tokens of the recipe.
    max_response_tokens=32768,  # cal s.2: DeepSWE 32k response.
    # assumption: file views and test logs; most short, some pages long.
    tool_output_tokens=LogNormal.from_median_p90(400, 2500),
    max_tool_output_tokens=4096,  # assumption: agent scaffolds truncate long observations.
    # Tool mix 80/20 and the timeouts are assumptions (agent scaffolds' defaults vary).
    tools=(
        # cal s.2 (assumption there): shell actions 0.5-10 s.
        ToolModel("shell", 0.8, LogNormal.from_range(0.5, 10), max_time_s=120),
        # cal s.2 (assumption there): test runs up to minutes. Read as a tail: 2-60 s for 90%
        # of runs (median 11 s), ~1% over two minutes, cut at a 10-minute timeout.
        ToolModel("tests", 0.2, LogNormal.from_range(2, 60), max_time_s=600),
    ),
    group_size=8,  # cal s.2: DeepSWE samples 8 per prompt.
)

SEARCH = WorkloadSpec(
    name="search",
    description="Search agent: Search-R1's 2-4 short turns with ASearcher-style long tails",
    prompt_tokens=LogNormal.from_median_p90(250, 450),  # assumption: question + template.
    turns=TurnModel(
        body=LogNormal(3, 0.2),  # cal s.2: Search-R1 takes 2-4 turns.
        effort_exponent=0.5,
        # assumption: a few samples go long-horizon like ASearcher (cal s.2: >40 tool calls in
        # the tail, up to 128 turns), more often on hard prompts.
        tail_probability=0.04,
        tail=LogNormal(16, 0.6),
        max_turns=128,  # cal s.2: ASearcher allows up to 128 turns.
    ),
    output_tokens=_qwen3_shaped(400),  # cal s.2: Search-R1 ~500 tokens per turn.
    max_output_tokens_per_turn=1024,  # assumption: room for Qwen3's thinking over ~500.
    # assumption: cal s.2 reports >150k output tokens in ASearcher's tail; we cap at 64k.
    max_response_tokens=65536,
    tool_output_tokens=LogNormal.from_median_p90(450, 500),  # cal s.2: ~500-token observations.
    max_tool_output_tokens=500,  # cal s.2: Search-R1 truncates observations at 500 tokens.
    tools=(
        # cal s.2 (assumption there): search 0.1-2 s.
        # The 30 s timeout is an assumption.
        ToolModel("search", 1.0, LogNormal.from_range(0.1, 2), max_time_s=30),
    ),
    group_size=8,  # cal s.2: GRPO groups of 8-16.
)

MATH = WorkloadSpec(
    name="math",
    description="Math agent with a python tool: ReTool's reasoning with code calls",
    prompt_tokens=LogNormal.from_median_p90(300, 600),  # assumption: problem + template.
    turns=TurnModel(
        body=LogNormal(3, 0.5),  # assumption: a few code calls per solution.
        max_turns=16,  # cal s.2: verl ReTool, max 16 turns.
    ),
    output_tokens=_qwen3_shaped(600),  # assumption: reasoning between code calls.
    first_turn_factor=2.5,  # assumption: the long reasoning comes before the first code call.
    max_output_tokens_per_turn=16384,
    max_response_tokens=16384,  # cal s.2: verl ReTool, 16k response.
    tool_output_tokens=LogNormal.from_median_p90(80, 400),  # assumption: short stdout.
    max_tool_output_tokens=1024,  # assumption: the sandbox caps captured output.
    tools=(
        # cal s.2 (assumption there): python sandbox 0.1-5 s.
        # The 30 s timeout is an assumption.
        ToolModel("python", 1.0, LogNormal.from_range(0.1, 5), max_time_s=30),
    ),
    group_size=16,  # cal s.2: verl ReTool, 64 prompts x 16 samples.
)

WORKLOADS: dict[str, WorkloadSpec] = {spec.name: spec for spec in (CODING, SEARCH, MATH)}
