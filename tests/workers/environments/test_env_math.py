"""The math environment with scripted model outputs and the real python tool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.events import PythonTool, ToolRequest, ToolReturned
from heddle.workers.environments import StepOutcome, TaskError, create_environment
from heddle.workers.environments.answers import math_answers_match, parse_number
from heddle.workers.environments.math_env import MathEnvironment, MathOptions
from heddle.workers.tokenizers import ByteTokenizer

Execute = Callable[[ToolRequest], Awaitable[ToolReturned]]
TASK = {"question": "What is the sum of the integers from 1 to 100?", "answer": 5050}


def answer(text: str, task: dict[str, object] = TASK) -> StepOutcome:
    env = create_environment("math")
    env.reset(task)
    return env.step(text)


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ("The sum is \\boxed{5050}.", 1.0),
        ("Gauss: n(n+1)/2.\nAnswer: 5,050", 1.0),
        ("final answer: 5050.0", 1.0),
        ("\\boxed{5051}", 0.0),
        ("Answer: five thousand", 0.0),
    ],
)
def test_final_answers_are_checked(text: str, reward: float) -> None:
    assert answer(text) == StepOutcome.finish(reward, "answered")


def test_answers_in_other_forms() -> None:
    assert answer("\\boxed{\\frac{3}{8}}", {"question": "3/8?", "answer": "0.375"}).reward == 1.0
    assert answer("Answer: Paris", {"question": "Capital?", "answer": "paris"}).reward == 1.0
    assert parse_number("1e400") is None
    assert math_answers_match("0.3333333", "1/3", rel_tolerance=1e-6)


async def test_python_tool_then_answer(execute: Execute) -> None:
    env = create_environment("math")
    prompt = env.reset(TASK)
    assert "```python" in prompt.text and "1 to 100" in prompt.text
    outcome = env.step("Let me compute.\n```python\nprint(sum(range(101)))\n```\n")
    assert outcome.tool_request == PythonTool(code="print(sum(range(101)))\n")
    result = await execute(outcome.tool_request)
    observed = env.observe(result)
    assert observed.observation is not None
    assert observed.observation.text == "```output\n5050\n```\n"
    assert env.step("So \\boxed{5050}") == StepOutcome.finish(1.0, "answered")


async def test_failing_code_shows_the_error(execute: Execute) -> None:
    env = create_environment("math")
    env.reset(TASK)
    outcome = env.step("```python\nprint(undefined_name)\n```")
    assert outcome.tool_request is not None
    observed = env.observe(await execute(outcome.tool_request))
    assert observed.observation is not None
    assert "NameError" in observed.observation.text


def test_earliest_action_wins() -> None:
    assert answer("Answer: 5050\n```python\nprint(1)\n```").done
    outcome = answer("```python\nprint(1)\n```\nAnswer: 5050")
    assert outcome.tool_request == PythonTool(code="print(1)\n")


def test_gibberish_ends_with_zero_reward() -> None:
    assert answer("asdf qwer }{ ``` boxed") == StepOutcome.finish(
        0.0, "no code and no final answer"
    )


def test_turn_limit_ends_a_code_loop() -> None:
    env = MathEnvironment(MathOptions(max_turns=2))
    env.reset(TASK)
    first = env.step("```python\nprint(1)\n```")
    assert first.tool_request is not None
    env.observe(_returned("1\n"))
    assert env.step("```python\nprint(2)\n```") == StepOutcome.finish(
        0.0, "turn limit reached without an answer"
    )


def _returned(output: str) -> ToolReturned:
    return ToolReturned(
        event_id="e",
        occurred_at=0.0,
        traj_id="t",
        step=0,
        call_id="k",
        tool="python",
        status="ok",
        output=output,
    )


_CODE = "```python\nprint(1)\n```"
generations = st.one_of(
    st.binary(max_size=40).map(lambda data: ByteTokenizer().decode(list(data))),
    st.sampled_from([_CODE, f"hmm {_CODE} more", "\\boxed{5050}", "Answer: 12"]),
)


@given(st.lists(generations, min_size=8, max_size=8))
def test_any_model_output_terminates_within_max_turns(texts: list[str]) -> None:
    """Random bytes (a random tiny model) mixed with code loops: the trajectory ends within
    max_turns generations, with reward 0 or 1."""
    env = MathEnvironment(MathOptions(max_turns=8))
    env.reset(TASK)
    for text in texts:
        outcome = env.step(text)
        if outcome.done:
            assert outcome.reward in (0.0, 1.0)
            return
        assert outcome.tool_request is not None
        env.observe(_returned(""))
    raise AssertionError("no end within max_turns generations")


def test_math_task_fields_are_checked() -> None:
    with pytest.raises(TaskError, match="unknown field `questoin`"):  # a typo is not ignored
        create_environment("math").reset({"question": "q", "answer": 1, "questoin": "q2"})
    create_environment("math").reset({"question": "q", "answer": 1, "meta": {"source": "gsm8k"}})
    with pytest.raises(TaskError, match="question"):
        create_environment("math").reset({"question": "  ", "answer": 1})
    with pytest.raises(TaskError, match="answer"):
        create_environment("math").reset({"question": "q", "answer": None})
