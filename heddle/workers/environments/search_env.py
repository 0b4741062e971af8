"""``search``: answer a question by searching a local corpus.

Task: ``{"question": str, "answer": str | [str, ...], "id": str (optional), "corpus": str
(optional)}``. Actions in a generation (the earliest counts): ``<search>query</search>`` sends a
``SearchTool`` call (BM25 over the corpus: the task's ``corpus``, else the environment's option,
else the executor's default) and the hits come back inside ``<information>...</information>``;
``<answer>X</answer>`` ends the trajectory with reward 1/0 for a normalized exact match against
any accepted answer, or the best token F1 with ``match=f1``. No action, or a search at the last
allowed turn, ends it with reward 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from heddle.events.commands import SearchTool
from heddle.events.trajectory import ToolReturned
from heddle.workers.environments.answers import exact_match, token_f1
from heddle.workers.environments.base import (
    EnvironmentBase,
    Observation,
    StepOutcome,
    Task,
    TaskError,
    convert_task,
)
from heddle.workers.environments.parsing import earliest, find_tag

PROMPT = (
    "Answer the question. To search the knowledge base write <search>your query</search>; the "
    "results appear in <information></information>. Give the final answer as "
    "<answer>your answer</answer>.\n\nQuestion: {question}\n"
)

AnswerMatch = Literal["exact", "f1"]


class SearchTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    question: str
    answer: str | list[str]
    id: str = ""
    corpus: str = ""
    meta: dict[str, Any] = {}
    """Free-form data the environment ignores (dataset, difficulty, ...): the one place for
    extra fields, any other unknown field is refused."""

    @property
    def answers(self) -> list[str]:
        return [self.answer] if isinstance(self.answer, str) else list(self.answer)


@dataclass(frozen=True, slots=True)
class SearchOptions:
    corpus: str = field(default="", metadata={"help": "corpus path ('' = executor default)"})
    top_k: int = field(default=3, metadata={"help": "documents per search"})
    max_turns: int = field(default=8, metadata={"help": "generations before a forced end"})
    match: AnswerMatch = field(default="exact", metadata={"help": "exact or f1 reward"})
    max_observation_chars: int = field(default=3000, metadata={"help": "search output kept"})

    def __post_init__(self) -> None:
        if min(self.top_k, self.max_turns, self.max_observation_chars) < 1:
            raise ValueError("search options: top_k, max_turns, max_observation_chars must be >= 1")


def parse_search_task(task: Task) -> SearchTask:
    parsed = convert_task(task, SearchTask, "search")
    if not parsed.question.strip():
        raise TaskError("search task: `question` must not be empty")
    if not parsed.answers or not all(answer.strip() for answer in parsed.answers):
        raise TaskError("search task: `answer` needs at least one non-empty answer")
    return parsed


class SearchEnvironment(EnvironmentBase[SearchTask]):
    name = "search"

    def __init__(self, options: SearchOptions | None = None) -> None:
        super().__init__()
        self.options = options or SearchOptions()

    def _parse_task(self, task: Task) -> SearchTask:
        return parse_search_task(task)

    def _prompt(self) -> Observation:
        return Observation(text=PROMPT.format(question=self.task.question))

    def _step(self, text: str) -> StepOutcome:
        action = earliest(
            ("search", find_tag(text, "search")), ("answer", find_tag(text, "answer"))
        )
        if action is None:
            return StepOutcome.finish(0.0, "no search and no answer")
        kind, found = action
        if kind == "answer":
            return StepOutcome.finish(self._reward(found.content), "answered")
        if self.num_generations >= self.options.max_turns:
            return StepOutcome.finish(0.0, "turn limit reached without an answer")
        corpus = self.task.corpus or self.options.corpus
        return StepOutcome.call(
            SearchTool(query=found.content, top_k=self.options.top_k, corpus=corpus)
        )

    def _observe(self, result: ToolReturned) -> StepOutcome:
        text = result.output if result.status == "ok" else f"search failed: {result.error}"
        if len(text) > self.options.max_observation_chars:
            text = text[: self.options.max_observation_chars] + " ..."
        return StepOutcome.feedback(Observation(text=f"<information>\n{text}\n</information>\n"))

    def _reward(self, prediction: str) -> float:
        if self.options.match == "f1":
            return token_f1(prediction, self.task.answers)
        return exact_match(prediction, self.task.answers)


def create_search_environment(options: SearchOptions) -> SearchEnvironment:
    return SearchEnvironment(options)
