"""The reference time of a trajectory alone on a worker, for the simulator and planner tests."""

from __future__ import annotations

from heddle.policy.cost.model import CostModel
from heddle.traces import TraceTrajectory


def analytic_solo_s(t: TraceTrajectory, cost: CostModel) -> float:
    """Prefill of what is new (attending to the context before it), one decode step per token
    at batch 1, then the tool."""
    total, context, new = 0.0, t.prompt_tokens, t.prompt_tokens
    for index, step in enumerate(t.steps):
        total += cost.prefill_s(new, context - new)
        total += sum(cost.decode_step_s(1, context + j) for j in range(step.output_tokens))
        context += step.output_tokens + step.tool_output_tokens
        new = step.tool_output_tokens
        if index < len(t.steps) - 1:
            total += step.tool_s
    return total
