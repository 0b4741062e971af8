"""``token_class``: answer with a character of the class the prompt names (a toy RL task).

Task: ``{"target": int, "id": str (optional)}`` with ``0 <= target < num_classes``. The prompt
is the class itself, in decimal (``"2"``); one generation; the reward is 1 when the answer's
first character is ASCII and its code modulo ``num_classes`` is ``target``, else 0. A random
policy over the byte vocabulary earns about ``1 / (2 * num_classes)`` (half the bytes are not
ASCII), and a tiny model learns the mapping in a few policy-gradient steps: the task of
``heddle.examples.grpo``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from heddle.events.trajectory import ToolReturned
from heddle.workers.environments.base import (
    EnvironmentBase,
    Observation,
    StepOutcome,
    Task,
    TaskError,
    convert_task,
)


class TokenClassTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    target: int
    id: str = ""
    meta: dict[str, Any] = {}
    """Free-form data the environment ignores (dataset, difficulty, ...): the one place for
    extra fields, any other unknown field is refused."""


@dataclass(frozen=True, slots=True)
class TokenClassOptions:
    num_classes: int = field(default=4, metadata={"help": "classes of ASCII codes (code % n)"})

    def __post_init__(self) -> None:
        if self.num_classes < 2:
            raise ValueError("token_class options: num_classes must be >= 2")


def parse_token_class_task(task: Task) -> TokenClassTask:
    parsed = convert_task(task, TokenClassTask, "token_class")
    if parsed.target < 0:
        raise TaskError("token_class task: `target` must be >= 0")
    return parsed


def answer_class(text: str, num_classes: int) -> int | None:
    """The class of the answer's first character (None: empty or not ASCII)."""
    if not text or ord(text[0]) >= 128:
        return None
    return ord(text[0]) % num_classes


class TokenClassEnvironment(EnvironmentBase[TokenClassTask]):
    name = "token_class"

    def __init__(self, options: TokenClassOptions | None = None) -> None:
        super().__init__()
        self.options = options or TokenClassOptions()

    def _parse_task(self, task: Task) -> TokenClassTask:
        parsed = parse_token_class_task(task)
        if parsed.target >= self.options.num_classes:
            raise TaskError(f"token_class task: `target` must be < {self.options.num_classes}")
        return parsed

    def _prompt(self) -> Observation:
        return Observation(text=str(self.task.target))

    def _step(self, text: str) -> StepOutcome:
        is_right = answer_class(text, self.options.num_classes) == self.task.target
        return StepOutcome.finish(1.0 if is_right else 0.0, "answered")

    def _observe(self, result: ToolReturned) -> StepOutcome:
        raise TaskError("token_class calls no tool")


def create_token_class_environment(options: TokenClassOptions) -> TokenClassEnvironment:
    return TokenClassEnvironment(options)
