"""``math``: a question with a known answer; the model may run Python before answering.

Task: ``{"question": str, "answer": str | number, "id": str (optional)}``. Each generation is
read for its earliest action: a ```python block (run by the python tool; its output comes back
as the next observation), ``\\boxed{X}`` or a line ``Answer: X`` (the end: reward 1 when X
matches the task's answer within tolerance, else 0). A generation with no action ends the
trajectory with reward 0, and so does a code block at the last allowed turn, so gibberish from a
random model always terminates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from heddle.events.commands import PythonTool
from heddle.events.trajectory import ToolReturned
from heddle.workers.environments.answers import math_answers_match
from heddle.workers.environments.base import (
    EnvironmentBase,
    Observation,
    StepOutcome,
    Task,
    TaskError,
    convert_task,
)
from heddle.workers.environments.parsing import (
    earliest,
    find_answer_line,
    find_boxed,
    find_code_block,
)

PROMPT = (
    "Solve the problem. You may run Python by writing a ```python code block; you will see its "
    "output. Give the final answer as \\boxed{{ANSWER}} or on a line 'Answer: ANSWER'.\n\n"
    "Problem: {question}\n"
)


class MathTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    question: str
    answer: str | int | float
    id: str = ""
    meta: dict[str, Any] = {}
    """Free-form data the environment ignores (dataset, difficulty, ...): the one place for
    extra fields, any other unknown field is refused."""


@dataclass(frozen=True, slots=True)
class MathOptions:
    max_turns: int = field(default=8, metadata={"help": "generations before a forced end"})
    rel_tolerance: float = field(default=1e-6, metadata={"help": "numeric answer tolerance"})
    max_observation_chars: int = field(default=2000, metadata={"help": "tool output kept"})

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.max_observation_chars < 1 or self.rel_tolerance < 0:
            raise ValueError("math options: max_turns and max_observation_chars must be >= 1")


def parse_math_task(task: Task) -> MathTask:
    parsed = convert_task(task, MathTask, "math")
    if not parsed.question.strip():
        raise TaskError("math task: `question` must not be empty")
    return parsed


def tool_output_text(result: ToolReturned, max_chars: int) -> str:
    """A tool result as the text a model reads next (stdout, then stderr), capped."""
    text = result.output + (f"\n{result.error}" if result.error else "")
    if len(text) > max_chars:
        text = text[:max_chars] + "\n[... truncated]"
    return f"```output\n{text.rstrip()}\n```\n"


class MathEnvironment(EnvironmentBase[MathTask]):
    name = "math"

    def __init__(self, options: MathOptions | None = None) -> None:
        super().__init__()
        self.options = options or MathOptions()

    def _parse_task(self, task: Task) -> MathTask:
        return parse_math_task(task)

    def _prompt(self) -> Observation:
        return Observation(text=PROMPT.format(question=self.task.question))

    def _step(self, text: str) -> StepOutcome:
        action = earliest(
            ("code", find_code_block(text)),
            ("answer", find_boxed(text)),
            ("answer", find_answer_line(text)),
        )
        if action is None:
            return StepOutcome.finish(0.0, "no code and no final answer")
        kind, found = action
        if kind == "answer":
            is_right = math_answers_match(
                found.content, self.task.answer, rel_tolerance=self.options.rel_tolerance
            )
            return StepOutcome.finish(1.0 if is_right else 0.0, "answered")
        if self.num_generations >= self.options.max_turns:
            return StepOutcome.finish(0.0, "turn limit reached without an answer")
        return StepOutcome.call(PythonTool(code=found.content))

    def _observe(self, result: ToolReturned) -> StepOutcome:
        text = tool_output_text(result, self.options.max_observation_chars)
        return StepOutcome.feedback(Observation(text=text))


def create_math_environment(options: MathOptions) -> MathEnvironment:
    return MathEnvironment(options)
