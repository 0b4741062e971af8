"""``trace``: replay one recorded trajectory (a trace line) with any engine.

The task is a trace line (``heddle.traces``). Each step's recorded ``output_tokens`` becomes the
next generation's target length, and each gap between steps becomes a ``TraceTool`` call with the
recorded tool time and observation length; the trajectory ends after the last step. The
generated text is not read: the trace, not the model, decides what happens.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import msgspec

from heddle.events.commands import TraceTool
from heddle.events.trajectory import ToolReturned
from heddle.traces import TraceError, TraceTrajectory, parse_trace_line
from heddle.workers.environments.base import (
    EnvironmentBase,
    Observation,
    StepOutcome,
    Task,
    TaskError,
)
from heddle.workers.tools.trace import pseudo_token_ids


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """The trace environment has no options: the trace line says everything."""


def stable_seed(*parts: object) -> int:
    """A seed from ``parts`` that is the same in every process (unlike ``hash``)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def parse_trace_task(task: Task) -> TraceTrajectory:
    try:
        return parse_trace_line(msgspec.json.encode(dict(task)), source="trace task")
    except (TraceError, TypeError) as exc:
        raise TaskError(str(exc)) from None


class TraceEnvironment(EnvironmentBase[TraceTrajectory]):
    name = "trace"

    def __init__(self, options: TraceOptions | None = None) -> None:
        super().__init__()

    def _parse_task(self, task: Task) -> TraceTrajectory:
        return parse_trace_task(task)

    def _prompt(self) -> Observation:
        trace = self.task
        prompt_ids = pseudo_token_ids(stable_seed(trace.id, "prompt"), trace.prompt_tokens)
        return Observation(
            token_ids=tuple(prompt_ids), target_output_tokens=trace.steps[0].output_tokens
        )

    def _step(self, text: str) -> StepOutcome:
        index = self.num_generations - 1
        if index >= len(self.task.steps) - 1:
            return StepOutcome.finish(0.0, "trace ended")
        step = self.task.steps[index]
        return StepOutcome.call(
            TraceTool(
                duration_s=step.tool_s,
                num_output_tokens=step.tool_output_tokens,
                seed=stable_seed(self.task.id, index),
            )
        )

    def _observe(self, result: ToolReturned) -> StepOutcome:
        next_step = self.task.steps[self.num_generations]
        return StepOutcome.feedback(
            Observation(
                token_ids=tuple(result.output_token_ids),
                target_output_tokens=next_step.output_tokens,
            )
        )


def create_trace_environment(options: TraceOptions) -> TraceEnvironment:
    return TraceEnvironment(options)
