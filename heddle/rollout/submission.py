"""What a rollout submits, its trajectory specs, and ``submit``: the request that opens it.

A rollout is opened by the control plane's operations service, the one door (docs/trainer.md,
``heddle.controlplane.submissions``): ``submit`` sends the plan as a request on
``heddle.ops.submit.<trainer>`` (uploading it first to the trainer's bucket when it is larger
than a request carries), and the service checks it against the deployment and publishes
``RolloutSubmitted`` and one ``TrajectorySubmitted`` per trajectory, or refuses it
(``SubmissionRefused``, naming the trajectory and field) with nothing stored. The rollout id is
chosen here, so a request retried after a timeout or a restarting control plane completes the
same rollout and gets the first reply.

Specs come from a trace (``trace_specs``: each trajectory replays its trace line with the
``trace`` environment, the prompt is the environment's pseudo-tokens) or from tasks of a real
environment (``task_specs``: each task sampled ``group_size`` times, prompt token ids from the
environment's prompt and the workers' tokenizer, so the control plane sees the true prompt
length). Bad tasks raise ``TaskError`` (a ``ValueError``) naming the task and field.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from heddle.control.systems import SYSTEMS
from heddle.events import ChatMessage, SamplingParams, TrajectorySpec
from heddle.ids import group_id
from heddle.traces import TRACE_ENVIRONMENT, TraceTrajectory
from heddle.workers.environments import create_environment
from heddle.workers.environments.base import TaskError
from heddle.workers.tokenizers import Tokenizer

DEFAULT_MAX_TOTAL_TOKENS = 131072


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """Everything a submission needs besides the bus."""

    policy: str
    specs: list[TrajectorySpec]
    source: str = ""
    """For humans: ``workload:coding``, ``trace:FILE``, ``tasks:FILE``."""
    time_scale: float | None = None
    """Model seconds per wall second of the workers that run it (sim engines); None: the
    deployment's (another value is refused)."""
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.specs:
            raise ValueError("a rollout needs at least one trajectory")
        if self.time_scale is not None and not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")
        if self.policy not in SYSTEMS:
            raise ValueError(f"unknown policy {self.policy!r}; choose one of {', '.join(SYSTEMS)}")

    @property
    def num_trajectories(self) -> int:
        return len(self.specs)


def new_rollout_id() -> str:
    """A fresh rollout id: UTC time to the second plus random hex (sortable, subject-safe)."""
    return f"r{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"


def trace_specs(
    trace: Sequence[TraceTrajectory], *, tool_pool: str = "default"
) -> list[TrajectorySpec]:
    """One ``trace`` trajectory per trace line, in order (groups from the trace's groups). The
    samples of a group share their prompt, as GRPO samples of one prompt do."""
    specs: list[TrajectorySpec] = []
    prompts: dict[tuple[str, int], list[int]] = {}
    for index, trajectory in enumerate(trace):
        task = msgspec.to_builtins(trajectory)
        key = (trajectory.group or trajectory.id, trajectory.prompt_tokens)
        prompt = prompts.get(key)
        if prompt is None:
            prompt = prompts[key] = _prompt_token_ids(TRACE_ENVIRONMENT, task, None)
        specs.append(
            TrajectorySpec(
                group_id=trajectory.group or trajectory.id,
                index=index,
                environment=TRACE_ENVIRONMENT,
                task=task,
                prompt_token_ids=prompt,
                max_steps=len(trajectory.steps),
                max_new_tokens=max(1, max(step.output_tokens for step in trajectory.steps)),
                max_total_tokens=max(DEFAULT_MAX_TOTAL_TOKENS, trajectory.num_context_tokens + 1),
                tool_pool=tool_pool,
            )
        )
    return specs


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """How tasks of a real environment become trajectories."""

    group_size: int = 8
    """Samples per task (GRPO-style group sampling)."""
    max_steps: int = 16
    max_new_tokens: int = 1024
    max_total_tokens: int = 32768
    max_response_tokens: int | None = None
    """Cap on each trajectory's response (generations and observations); None: no cap."""
    temperature: float = 1.0
    seed: int = 0
    """Base of each trajectory's sampling seed (seed + index)."""
    tool_pool: str = "default"
    max_staleness: int | None = None
    """Partial rollout's bound on the weight versions one trajectory spans; None: no bound."""
    max_attempts: int = 3
    """Runs a trajectory slot may take: one that goes stale (beyond ``max_staleness``) is
    resubmitted afresh until its last attempt, which ends ``stale`` (1: never resubmitted)."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError("max_staleness must be >= 0 (or None: no bound)")
        if self.group_size < 1 or self.max_steps < 1 or self.max_new_tokens < 1:
            raise ValueError("group_size, max_steps and max_new_tokens must be >= 1")
        if self.max_total_tokens <= self.max_new_tokens:
            raise ValueError("max_total_tokens must exceed max_new_tokens")
        if self.max_response_tokens is not None and self.max_response_tokens < 1:
            raise ValueError("max_response_tokens must be >= 1 (or None: no cap)")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")


@dataclass(frozen=True, slots=True)
class TaskPrompts:
    """Prompts a trainer supplies instead of the environment's, one per task (or none)."""

    token_ids: Sequence[Sequence[int]] | None = None
    """Prompt token ids the trainer tokenized itself."""
    messages: Sequence[Sequence[ChatMessage]] | None = None
    """Chat prompts, tokenized by the workers with their model's chat template."""

    def check(self, num_tasks: int, tokenizer: Tokenizer) -> None:
        """``TaskError`` naming the first prompt that cannot be used."""
        if self.token_ids is not None and self.messages is not None:
            raise TaskError("give prompt token ids or chat messages, not both")
        for name, prompts in (("prompt_token_ids", self.token_ids), ("messages", self.messages)):
            if prompts is not None and len(prompts) != num_tasks:
                raise TaskError(f"{len(prompts)} {name} for {num_tasks} tasks: give one per task")
        for task_index, ids in enumerate(self.token_ids or ()):
            bad = [token_id for token_id in ids if not 0 <= token_id < tokenizer.vocab_size]
            if not ids or bad:
                what = f"id {bad[0]} outside [0, {tokenizer.vocab_size})" if bad else "no ids"
                raise TaskError(f"task {task_index + 1}: prompt_token_ids has {what}")
        for task_index, messages in enumerate(self.messages or ()):
            if not messages:
                raise TaskError(f"task {task_index + 1}: messages is empty")


def task_specs(
    tasks: Sequence[Mapping[str, Any]],
    environment: str,
    tokenizer: Tokenizer,
    options: TaskOptions | None = None,
    prompts: TaskPrompts | None = None,
) -> list[TrajectorySpec]:
    """``group_size`` trajectories per task, tasks in order; ``TaskError`` for a bad task.
    ``prompts``: the trainer's own prompt per task (token ids or chat messages)."""
    options = options or TaskOptions()
    prompts = prompts or TaskPrompts()
    prompts.check(len(tasks), tokenizer)
    specs: list[TrajectorySpec] = []
    for task_index, task in enumerate(tasks):
        try:
            prompt = _prompt_token_ids(environment, dict(task), tokenizer)
        except ValueError as exc:
            raise TaskError(f"task {task_index + 1}: {exc}") from None
        messages: list[ChatMessage] = []
        if prompts.token_ids is not None:
            prompt = list(prompts.token_ids[task_index])
        elif prompts.messages is not None:
            prompt, messages = [], list(prompts.messages[task_index])
        for _ in range(options.group_size):
            index = len(specs)
            specs.append(
                TrajectorySpec(
                    group_id=group_id(task_index),
                    index=index,
                    environment=environment,
                    task=dict(task),
                    prompt_token_ids=prompt,
                    messages=messages,
                    max_steps=options.max_steps,
                    max_new_tokens=options.max_new_tokens,
                    max_total_tokens=options.max_total_tokens,
                    max_response_tokens=options.max_response_tokens,
                    sampling=SamplingParams(
                        temperature=options.temperature, seed=options.seed + index
                    ),
                    tool_pool=options.tool_pool,
                    max_staleness=options.max_staleness,
                    max_attempts=options.max_attempts,
                )
            )
    return specs


def _prompt_token_ids(
    environment: str, task: dict[str, Any], tokenizer: Tokenizer | None
) -> list[int]:
    """The prompt a worker would build (the environment's reset observation, tokenized)."""
    observation = create_environment(environment).reset(task)
    if observation.token_ids is not None:
        return list(observation.token_ids)
    if tokenizer is None:
        raise TaskError(f"environment {environment!r} needs a tokenizer for its prompt")
    return observation.tokens(tokenizer)
