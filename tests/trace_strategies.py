"""Hypothesis strategies for simulator traces: GRPO groups whose samples share a prompt."""

from __future__ import annotations

from hypothesis import strategies as st

from heddle.traces import TraceStep, TraceTrajectory


def grouped_rollouts(
    *,
    max_samples: int,
    max_prompt_tokens: int,
    max_output_tokens: int,
    tool_s: tuple[float, ...],
    max_tool_output_tokens: int,
    max_steps: int,
) -> st.SearchStrategy[list[TraceTrajectory]]:
    """1-3 groups of 1-``max_samples`` samples; a group's samples share its prompt."""
    steps = st.lists(
        st.builds(
            TraceStep,
            output_tokens=st.integers(1, max_output_tokens),
            tool_s=st.sampled_from(tool_s),
            tool_output_tokens=st.integers(0, max_tool_output_tokens),
        ),
        min_size=1,
        max_size=max_steps,
    )

    @st.composite
    def draw_rollout(draw: st.DrawFn) -> list[TraceTrajectory]:
        trace: list[TraceTrajectory] = []
        for group in range(draw(st.integers(1, 3))):
            prompt = draw(st.integers(1, max_prompt_tokens))
            for sample in range(draw(st.integers(1, max_samples))):
                trace.append(
                    TraceTrajectory(
                        id=f"g{group}-s{sample}",
                        group=f"g{group}",
                        prompt_tokens=prompt,
                        steps=draw(steps),
                    )
                )
        return trace

    return draw_rollout()
