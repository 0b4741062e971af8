"""The environment contract: observations, step outcomes, the call-order state machine, replay.

See the package docstring for the agent loop this serves.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from heddle.events.commands import ToolRequest
from heddle.events.trajectory import ToolReturned
from heddle.workers.tokenizers import Tokenizer

Task = Mapping[str, Any]
"""The ``TrajectorySpec.task`` payload; each environment validates it into its own struct."""


class TaskError(ValueError):
    """A task that does not fit its environment; the message names the environment and field."""


class EnvironmentStateError(RuntimeError):
    """The environment was driven out of order (e.g. ``observe`` with no tool call out)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What the worker appends to the context before the next generation."""

    text: str = ""
    """Text to tokenize and append (the prompt at reset, tool output or feedback later)."""
    token_ids: tuple[int, ...] | None = None
    """Exact ids to append instead of tokenizing ``text`` (trace replay's pseudo-tokens)."""
    target_output_tokens: int | None = None
    """Length the next generation must have (trace replay): the worker passes it to the engine
    as ``target_output_tokens`` and caps ``max_new_tokens`` with it."""

    def tokens(self, tokenizer: Tokenizer) -> list[int]:
        return list(self.token_ids) if self.token_ids is not None else tokenizer.encode(self.text)


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """The environment's answer to a generation (``step``) or a tool result (``observe``).

    Exactly one of three kinds:
    - ``done``: the trajectory ends with ``reward`` (``reason`` says why);
    - ``tool_request`` set: send it to a tool executor, then call ``observe`` with the result;
    - ``observation`` set: append it and generate again (no tool involved).
    """

    observation: Observation | None = None
    tool_request: ToolRequest | None = None
    done: bool = False
    reward: float = 0.0
    reason: str = ""

    def __post_init__(self) -> None:
        num_kinds = (
            int(self.done) + (self.tool_request is not None) + (self.observation is not None)
        )
        if num_kinds != 1:
            raise ValueError("a step outcome is exactly one of: done, a tool request, a feedback")

    @classmethod
    def finish(cls, reward: float, reason: str) -> StepOutcome:
        return cls(done=True, reward=reward, reason=reason)

    @classmethod
    def call(cls, request: ToolRequest) -> StepOutcome:
        return cls(tool_request=request)

    @classmethod
    def feedback(cls, observation: Observation) -> StepOutcome:
        return cls(observation=observation)


class Environment(Protocol):
    """One trajectory's environment. A fresh instance per trajectory; deterministic, so that
    ``replay`` rebuilds its state from the task and the history."""

    name: str

    def reset(self, task: Task) -> Observation:
        """Validate ``task`` (``TaskError`` naming the field) and return the prompt observation."""
        ...

    def step(self, text: str) -> StepOutcome:
        """Parse the action in a generation's decoded text."""
        ...

    def observe(self, result: ToolReturned) -> StepOutcome:
        """Take the result of the tool call the last ``step`` requested."""
        ...


class CallOrderState(enum.Enum):
    """Which call an environment accepts next (``EnvironmentBase`` enforces the order); not a
    trajectory's lifecycle phase (``heddle.events.TrajectoryPhase``), only its environment's."""

    NEW = "new"
    """Only ``reset``."""
    AWAITING_GENERATION = "awaiting_generation"
    """Only ``step`` (a generation's text)."""
    AWAITING_TOOL = "awaiting_tool"
    """Only ``observe`` (the result of the tool call the last ``step`` asked for)."""
    DONE = "done"
    """The episode ended: no call."""


TaskT = TypeVar("TaskT")


class EnvironmentBase(Generic[TaskT]):
    """Holds the parsed task and enforces the call order (reset, then step/observe alternating
    as outcomes say) so that a worker bug or a corrupt history fails loudly. Subclasses
    implement ``_parse_task``, ``_prompt``, ``_step`` and ``_observe``."""

    name = ""

    def __init__(self) -> None:
        self.call_state = CallOrderState.NEW
        self.num_generations = 0
        self._task: TaskT | None = None

    @property
    def task(self) -> TaskT:
        if self._task is None:
            raise EnvironmentStateError(f"{self.name}: used before reset")
        return self._task

    def reset(self, task: Task) -> Observation:
        if self.call_state is not CallOrderState.NEW:
            raise EnvironmentStateError(f"{self.name}: reset twice (use a fresh environment)")
        self._task = self._parse_task(task)
        observation = self._prompt()
        self.call_state = CallOrderState.AWAITING_GENERATION
        return observation

    def step(self, text: str) -> StepOutcome:
        self._expect(CallOrderState.AWAITING_GENERATION, "step")
        self.num_generations += 1
        return self._advance(self._step(text))

    def observe(self, result: ToolReturned) -> StepOutcome:
        self._expect(CallOrderState.AWAITING_TOOL, "observe")
        return self._advance(self._observe(result))

    def _expect(self, state: CallOrderState, method: str) -> None:
        if self.call_state is not state:
            raise EnvironmentStateError(
                f"{self.name}: {method} called while {self.call_state.value.replace('_', ' ')}"
            )

    def _advance(self, outcome: StepOutcome) -> StepOutcome:
        if outcome.done:
            self.call_state = CallOrderState.DONE
        elif outcome.tool_request is not None:
            self.call_state = CallOrderState.AWAITING_TOOL
        else:
            self.call_state = CallOrderState.AWAITING_GENERATION
        return outcome

    def _parse_task(self, task: Task) -> TaskT:
        """The validated task; ``TaskError`` naming the field when it does not fit."""
        raise NotImplementedError

    def _prompt(self) -> Observation:
        raise NotImplementedError

    def _step(self, text: str) -> StepOutcome:
        raise NotImplementedError

    def _observe(self, result: ToolReturned) -> StepOutcome:
        raise NotImplementedError


HistoryItem = str | ToolReturned
"""A generation's decoded text, or the result of the tool call it requested."""


@dataclass(frozen=True, slots=True)
class ReplayedState:
    """Where a replayed environment stands: the worker continues from here."""

    prompt: Observation
    last_outcome: StepOutcome | None
    """The outcome of the last history item (None: no generation yet). A tool request here means
    its result is not in the history: send the call again."""


def replay(env: Environment, task: Task, history: Sequence[HistoryItem]) -> ReplayedState:
    """Rebuild ``env`` (fresh) from ``task`` and the history of a trajectory, in order: every
    generation's text, each followed by its tool result when it requested a tool. Raises
    ``EnvironmentStateError`` when the history does not fit what the environment decides."""
    prompt = env.reset(task)
    outcome: StepOutcome | None = None
    for index, item in enumerate(history):
        if outcome is not None and outcome.done:
            raise EnvironmentStateError(f"history item {index} follows the end of the trajectory")
        outcome = env.observe(item) if isinstance(item, ToolReturned) else env.step(item)
    return ReplayedState(prompt=prompt, last_outcome=outcome)


def convert_task(task: Task, task_type: type[TaskT], environment: str) -> TaskT:
    """``task`` as ``task_type``; a missing or mistyped field raises ``TaskError`` naming it."""
    if not isinstance(task, Mapping):
        raise TaskError(f"{environment} task must be an object, got {type(task).__name__}")
    try:
        return msgspec.convert(dict(task), task_type)
    except msgspec.ValidationError as exc:
        raise TaskError(f"{environment} task: {exc}") from None
