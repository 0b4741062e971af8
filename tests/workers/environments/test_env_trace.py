"""The trace environment replays a trace line: lengths, tool calls, the end."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.events import ToolRequest, ToolReturned, TraceTool
from heddle.workers.environments import StepOutcome, TaskError, create_environment, replay
from heddle.workers.environments.trace_env import stable_seed
from heddle.workers.tools.trace import pseudo_token_ids

Execute = Callable[[ToolRequest], Awaitable[ToolReturned]]

LINE: dict[str, Any] = {
    "id": "t17",
    "group": "p3",
    "prompt_tokens": 12,
    "steps": [
        {"output_tokens": 42, "tool_s": 1.7, "tool_output_tokens": 5},
        {"output_tokens": 7, "tool_s": 0.2, "tool_output_tokens": 3},
        {"output_tokens": 9},
    ],
}


async def test_trace_line_drives_lengths_and_tool_calls(execute: Execute) -> None:
    env = create_environment("trace")
    prompt = env.reset(LINE)
    assert prompt.token_ids == tuple(pseudo_token_ids(stable_seed("t17", "prompt"), 12))
    assert prompt.target_output_tokens == 42

    first = env.step("any text: the trace decides")
    assert first.tool_request == TraceTool(
        duration_s=1.7, num_output_tokens=5, seed=stable_seed("t17", 0)
    )
    result = await execute(first.tool_request)
    observed = env.observe(result)
    assert observed.observation is not None
    assert observed.observation.token_ids == tuple(result.output_token_ids)
    assert len(result.output_token_ids) == 5
    assert observed.observation.target_output_tokens == 7

    second = env.step("")
    assert isinstance(second.tool_request, TraceTool)
    assert second.tool_request.duration_s == 0.2
    third = env.observe(await execute(second.tool_request))
    assert third.observation is not None and third.observation.target_output_tokens == 9
    assert env.step("") == StepOutcome.finish(0.0, "trace ended")


def test_bad_trace_task_names_the_field() -> None:
    env = create_environment("trace")
    with pytest.raises(TaskError, match="steps"):
        env.reset({"id": "x", "prompt_tokens": 3, "steps": []})
    with pytest.raises(TaskError, match="prompt_tokens"):
        create_environment("trace").reset({"id": "x", "steps": [{"output_tokens": 1}]})


def _tool_result(request: TraceTool, step: int) -> ToolReturned:
    """What an executor returns for a trace tool (the ids depend on the seed only)."""
    return ToolReturned(
        event_id=f"r:t:{step}:tool_returned",
        occurred_at=0.0,
        traj_id="t",
        step=step,
        call_id="k",
        tool="trace",
        status="ok",
        output_token_ids=pseudo_token_ids(request.seed, request.num_output_tokens),
    )


steps = st.lists(
    st.fixed_dictionaries(
        {
            "output_tokens": st.integers(0, 50),
            "tool_s": st.floats(0, 10),
            "tool_output_tokens": st.integers(0, 20),
        }
    ),
    min_size=1,
    max_size=6,
)


@given(steps, st.integers(0, 8), st.lists(st.text(max_size=5), min_size=6, max_size=6))
def test_replay_matches_the_live_run(
    trace_steps: list[dict[str, Any]], cut: int, texts: list[str]
) -> None:
    """Cut a live run anywhere; replaying its history lands in the same place."""
    line = {"id": "p", "prompt_tokens": 3, "steps": trace_steps}
    live = create_environment("trace")
    live.reset(line)
    history: list[str | ToolReturned] = []
    outcome: StepOutcome | None = None
    for index in range(len(trace_steps)):
        if len(history) >= cut:
            break
        outcome = live.step(texts[index])
        history.append(texts[index])
        if outcome.tool_request is not None and len(history) < cut:
            assert isinstance(outcome.tool_request, TraceTool)
            result = _tool_result(outcome.tool_request, index)
            outcome = live.observe(result)
            history.append(result)
    state = replay(create_environment("trace"), line, history)
    assert state.last_outcome == outcome
    if history:
        assert outcome is not None
    else:
        assert state.last_outcome is None
