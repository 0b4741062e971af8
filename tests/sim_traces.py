"""Small hand-made traces for the simulator tests: one trajectory from its steps, and a
hypothesis strategy of traces within given sizes."""

from __future__ import annotations

from hypothesis import strategies as st

from heddle.traces import TraceStep, TraceTrajectory


def trajectory(traj_id: str, prompt: int, steps: list[tuple[int, float, int]]) -> TraceTrajectory:
    """``steps``: (output tokens, tool seconds, tool output tokens) each; its own group."""
    return TraceTrajectory(
        id=traj_id,
        group=traj_id,
        prompt_tokens=prompt,
        steps=[TraceStep(output_tokens=o, tool_s=s, tool_output_tokens=u) for o, s, u in steps],
    )


def traces(
    *,
    prompt: tuple[int, int],
    output: tuple[int, int],
    tool_s: float,
    observation: tuple[int, int],
    max_steps: int,
    max_trajectories: int,
) -> st.SearchStrategy[list[TraceTrajectory]]:
    """Lists of 1..``max_trajectories`` trajectories of 1..``max_steps`` steps, each size drawn
    from its (low, high) range (tool seconds from 0 to ``tool_s``)."""
    steps = st.lists(
        st.tuples(st.integers(*output), st.floats(0.0, tool_s), st.integers(*observation)),
        min_size=1,
        max_size=max_steps,
    )
    rows = st.lists(st.tuples(st.integers(*prompt), steps), min_size=1, max_size=max_trajectories)
    return rows.map(
        lambda rows: [trajectory(f"t{i}", prompt, s) for i, (prompt, s) in enumerate(rows)]
    )
