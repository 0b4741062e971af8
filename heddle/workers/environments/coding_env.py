"""``coding``: write a function to a spec; the task's unit tests run in the sandbox.

Task: ``{"prompt": str, "tests": str, "id": str (optional), "solution_file": "solution.py"}``.
``tests`` is a Python test module importing from the solution module (``from solution import
f``); its ``test*`` functions and ``unittest.TestCase`` methods run. The first ```python block of
a generation becomes ``solution_file`` and a ``UnitTestTool`` call runs the tests; the reward is
the pass fraction (or 1/0 for all-pass) read from the runner's summary line, and the test output
is the observation. With ``max_attempts`` > 1 a failing attempt gets the test output back and
another try. A generation without a code block ends the trajectory with reward 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from heddle.events.commands import UnitTestTool
from heddle.events.trajectory import ToolReturned
from heddle.workers.environments.base import (
    EnvironmentBase,
    Observation,
    StepOutcome,
    Task,
    TaskError,
    convert_task,
)
from heddle.workers.environments.math_env import tool_output_text
from heddle.workers.environments.parsing import find_code_block

PROMPT = (
    "{prompt}\n\nReply with your solution in one ```python code block; it is saved as "
    "{solution_file} and tested.\n"
)
_SUMMARY = re.compile(r"^heddle-tests: passed=(\d+) failed=(\d+) total=(\d+)", re.M)

CodingReward = Literal["fraction", "all_pass"]


class CodingTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    prompt: str
    tests: str
    id: str = ""
    solution_file: str = "solution.py"
    meta: dict[str, Any] = {}
    """Free-form data the environment ignores (dataset, difficulty, ...): the one place for
    extra fields, any other unknown field is refused."""


@dataclass(frozen=True, slots=True)
class CodingOptions:
    max_attempts: int = field(default=1, metadata={"help": "test runs before the end"})
    reward: CodingReward = field(default="fraction", metadata={"help": "fraction or all_pass"})
    max_observation_chars: int = field(default=2000, metadata={"help": "test output kept"})

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.max_observation_chars < 1:
            raise ValueError("coding options: max_attempts and max_observation_chars must be >= 1")


def parse_coding_task(task: Task) -> CodingTask:
    parsed = convert_task(task, CodingTask, "coding")
    for name in ("prompt", "tests"):
        if not getattr(parsed, name).strip():
            raise TaskError(f"coding task: `{name}` must not be empty")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.py", parsed.solution_file):
        raise TaskError("coding task: `solution_file` must be a module file name like solution.py")
    return parsed


def count_passed_tests(output: str) -> tuple[int, int]:
    """(passed, total) from the last summary line of the test runner; (0, 0) without one."""
    matches = _SUMMARY.findall(output)
    if not matches:
        return 0, 0
    passed, _, total = matches[-1]
    return int(passed), int(total)


class CodingEnvironment(EnvironmentBase[CodingTask]):
    name = "coding"

    def __init__(self, options: CodingOptions | None = None) -> None:
        super().__init__()
        self.options = options or CodingOptions()
        self.num_attempts = 0

    def _parse_task(self, task: Task) -> CodingTask:
        return parse_coding_task(task)

    def _prompt(self) -> Observation:
        text = PROMPT.format(prompt=self.task.prompt, solution_file=self.task.solution_file)
        return Observation(text=text)

    def _step(self, text: str) -> StepOutcome:
        found = find_code_block(text)
        if found is None:
            return StepOutcome.finish(0.0, "no code block")
        self.num_attempts += 1
        files = {self.task.solution_file: found.content}
        return StepOutcome.call(UnitTestTool(files=files, test_code=self.task.tests))

    def _observe(self, result: ToolReturned) -> StepOutcome:
        passed, total = count_passed_tests(result.output)
        all_passed = total > 0 and passed == total
        if all_passed or self.num_attempts >= self.options.max_attempts:
            reason = f"{passed}/{total} tests passed" if total else f"no test ran ({result.status})"
            return StepOutcome.finish(self._reward(passed, total), reason)
        text = tool_output_text(result, self.options.max_observation_chars)
        return StepOutcome.feedback(Observation(text=f"{text}Some tests failed; fix the code.\n"))

    def _reward(self, passed: int, total: int) -> float:
        if total == 0:
            return 0.0
        if self.options.reward == "all_pass":
            return 1.0 if passed == total else 0.0
        return passed / total


def create_coding_environment(options: CodingOptions) -> CodingEnvironment:
    return CodingEnvironment(options)
