"""Where a rollout's trajectories come from: a synthetic workload, a trace file or a task file.

``load_source`` turns the CLI's choice into trajectory specs plus the history a learning
predictor may start from (for a workload: another epoch of the same prompts, the previous
training step, as ``heddle sim compare`` does). Every problem is a ``UserError`` naming the file,
line and field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from heddle.errors import UserError
from heddle.events import TrajectorySpec
from heddle.rollout.submission import TaskOptions, task_specs, trace_specs
from heddle.traces import TraceError, TraceTrajectory, read_trace
from heddle.workers.environments import environment_names, read_tasks
from heddle.workers.environments.base import TaskError
from heddle.workers.tokenizers import TokenizerError, load_tokenizer
from heddle.workloads import generate, workload_names


@dataclass(frozen=True, slots=True)
class SourceChoice:
    """Exactly one of ``workload``, ``trace`` or ``tasks`` (with ``environment``)."""

    workload: str | None = None
    num_trajectories: int = 128
    seed: int = 0
    trace: Path | None = None
    tasks: Path | None = None
    environment: str | None = None
    tokenizer: str = "byte"
    task_options: TaskOptions = field(default_factory=TaskOptions)


@dataclass(frozen=True, slots=True)
class Source:
    specs: list[TrajectorySpec]
    label: str
    """``workload:coding``, ``trace:FILE``, ``tasks:FILE``."""
    trace: list[TraceTrajectory]
    """The trajectories as a trace (empty for real tasks: their lengths are unknown)."""
    history: list[TraceTrajectory]


def load_source(choice: SourceChoice) -> Source:
    given = [name for name in ("workload", "trace", "tasks") if getattr(choice, name) is not None]
    if len(given) != 1:
        raise UserError("give exactly one of --workload, --trace or --tasks")
    if choice.workload is not None:
        return _workload(choice)
    if choice.trace is not None:
        return _trace(choice.trace)
    assert choice.tasks is not None
    return _tasks(choice)


def _workload(choice: SourceChoice) -> Source:
    name = choice.workload
    assert name is not None
    if name not in workload_names():
        choices = ", ".join(workload_names())
        raise UserError(f"unknown --workload {name!r}; choose one of {choices}")
    if choice.num_trajectories < 1:
        raise UserError(f"--trajectories must be >= 1, got {choice.num_trajectories}")
    if choice.seed < 0:
        raise UserError(f"--seed must be >= 0, got {choice.seed}")
    trace = generate(name, choice.num_trajectories, choice.seed)
    history = generate(name, choice.num_trajectories, choice.seed, epoch=1)
    return Source(trace_specs(trace), f"workload:{name}", trace, history)


def _trace(path: Path) -> Source:
    try:
        trace = read_trace(path)
    except TraceError as exc:
        raise UserError(str(exc)) from None
    return Source(trace_specs(trace), f"trace:{path}", trace, [])


def _tasks(choice: SourceChoice) -> Source:
    path, environment = choice.tasks, choice.environment
    assert path is not None
    if environment is None:
        raise UserError(f"--tasks needs --env, one of {', '.join(environment_names())}")
    if environment not in environment_names():
        choices = ", ".join(environment_names())
        raise UserError(f"unknown --env {environment!r}; choose one of {choices}")
    try:
        tokenizer = load_tokenizer(choice.tokenizer)
        tasks = read_tasks(path, environment)
        specs = task_specs(tasks, environment, tokenizer, choice.task_options)
    except (TaskError, TokenizerError) as exc:
        raise UserError(str(exc)) from None
    return Source(specs, f"tasks:{path}", [], [])
