"""The coding environment with scripted solutions and the real unit-test tool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from heddle.events import ToolRequest, ToolReturned, UnitTestTool
from heddle.workers.environments import StepOutcome, TaskError, create_environment
from heddle.workers.environments.coding_env import count_passed_tests

Execute = Callable[[ToolRequest], Awaitable[ToolReturned]]
TASK = {
    "id": "c1",
    "prompt": "Write `add(a, b)` returning the sum.",
    "tests": (
        "from solution import add\n"
        "def test_ints():\n    assert add(1, 2) == 3\n"
        "def test_negative():\n    assert add(-1, -1) == -2\n"
        "def test_strings():\n    assert add('a', 'b') == 'ab'\n"
    ),
}
RIGHT = "Here:\n```python\ndef add(a, b):\n    return a + b\n```\n"
NUMBERS_ONLY = "```python\ndef add(a, b):\n    return float(a) + float(b)\n```"


async def run_attempts(execute: Execute, texts: list[str], **options: str) -> StepOutcome:
    env = create_environment("coding", options)
    env.reset(TASK)
    for text in texts:
        outcome = env.step(text)
        if outcome.tool_request is None:
            return outcome
        outcome = env.observe(await execute(outcome.tool_request))
        if outcome.done:
            return outcome
    raise AssertionError("the environment did not end")


async def test_correct_solution_gets_full_reward(execute: Execute) -> None:
    env = create_environment("coding")
    prompt = env.reset(TASK)
    assert prompt.text.startswith("Write `add(a, b)`")
    outcome = env.step(RIGHT)
    assert outcome.tool_request == UnitTestTool(
        files={"solution.py": "def add(a, b):\n    return a + b\n"}, test_code=TASK["tests"]
    )
    assert env.observe(await execute(outcome.tool_request)) == StepOutcome.finish(
        1.0, "3/3 tests passed"
    )


async def test_partial_solution_reward_by_mode(execute: Execute) -> None:
    fraction = await run_attempts(execute, [NUMBERS_ONLY])
    assert fraction == StepOutcome.finish(2 / 3, "2/3 tests passed")
    all_pass = await run_attempts(execute, [NUMBERS_ONLY], reward="all_pass")
    assert all_pass.reward == 0.0


async def test_second_attempt_sees_the_test_output(execute: Execute) -> None:
    env = create_environment("coding", {"max-attempts": "2"})
    env.reset(TASK)
    first = env.step(NUMBERS_ONLY)
    assert first.tool_request is not None
    feedback = env.observe(await execute(first.tool_request))
    assert feedback.observation is not None
    assert "FAILED test_strings" in feedback.observation.text
    second = env.step(RIGHT)
    assert second.tool_request is not None
    assert env.observe(await execute(second.tool_request)).reward == 1.0


async def test_hanging_solution_scores_zero(execute: Execute) -> None:
    hang = "```python\ndef add(a, b):\n    while True:\n        pass\n```"
    env = create_environment("coding")
    env.reset(TASK)
    outcome = env.step(hang)
    assert outcome.tool_request is not None
    result = await execute(outcome.tool_request)
    assert result.status in ("timeout", "killed")
    assert env.observe(result) == StepOutcome.finish(0.0, f"no test ran ({result.status})")


def test_no_code_block_ends_with_zero() -> None:
    env = create_environment("coding")
    env.reset(TASK)
    assert env.step("def add(a, b): return a + b") == StepOutcome.finish(0.0, "no code block")


def test_summary_parsing_takes_the_last_line() -> None:
    forged = "heddle-tests: passed=9 failed=0 total=9\nPASSED x\n"
    assert count_passed_tests(forged + "heddle-tests: passed=1 failed=2 total=3\n") == (1, 3)
    assert count_passed_tests("no summary") == (0, 0)


def test_coding_task_fields_are_checked() -> None:
    with pytest.raises(TaskError, match="tests"):
        create_environment("coding").reset({"prompt": "p"})
    with pytest.raises(TaskError, match="solution_file"):
        create_environment("coding").reset({**TASK, "solution_file": "../x.py"})
