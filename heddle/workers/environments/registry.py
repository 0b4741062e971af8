"""Environments by name: typed options and a factory per entry; names feed CLI choices."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from heddle.workers.engines.options import OptionInfo, describe_options, parse_options
from heddle.workers.environments.base import Environment, Task
from heddle.workers.environments.coding_env import (
    CodingOptions,
    create_coding_environment,
    parse_coding_task,
)
from heddle.workers.environments.math_env import (
    MathOptions,
    create_math_environment,
    parse_math_task,
)
from heddle.workers.environments.search_env import (
    SearchOptions,
    create_search_environment,
    parse_search_task,
)
from heddle.workers.environments.token_class_env import (
    TokenClassOptions,
    create_token_class_environment,
    parse_token_class_task,
)
from heddle.workers.environments.trace_env import (
    TraceOptions,
    create_trace_environment,
    parse_trace_task,
)


@dataclass(frozen=True, slots=True)
class EnvironmentEntry:
    name: str
    options: type[Any]
    """Frozen dataclass of the environment's options (defaults for every field)."""
    factory: Callable[[Any], Environment]
    """``options -> a fresh environment`` (one per trajectory)."""
    validate_task: Callable[[Task], object]
    """Raises ``TaskError`` naming the field when a task does not fit."""
    summary: str

    def describe(self) -> list[OptionInfo]:
        return describe_options(self.options)


ENVIRONMENTS: dict[str, EnvironmentEntry] = {
    entry.name: entry
    for entry in (
        EnvironmentEntry(
            "trace",
            TraceOptions,
            create_trace_environment,
            parse_trace_task,
            "replay a trace line: recorded output lengths and tool times (any engine)",
        ),
        EnvironmentEntry(
            "math",
            MathOptions,
            create_math_environment,
            parse_math_task,
            "question with a known answer; python tool; boxed or 'Answer:' final answer",
        ),
        EnvironmentEntry(
            "coding",
            CodingOptions,
            create_coding_environment,
            parse_coding_task,
            "write a function; the task's unit tests run in the sandbox",
        ),
        EnvironmentEntry(
            "search",
            SearchOptions,
            create_search_environment,
            parse_search_task,
            "answer a question with BM25 search over a local corpus",
        ),
        EnvironmentEntry(
            "token_class",
            TokenClassOptions,
            create_token_class_environment,
            parse_token_class_task,
            "toy RL task: answer with a character of the named class (heddle.examples.grpo)",
        ),
    )
}


def environment_names() -> list[str]:
    return sorted(ENVIRONMENTS)


def environment_entry(name: str) -> EnvironmentEntry:
    try:
        return ENVIRONMENTS[name]
    except KeyError:
        raise ValueError(
            f"unknown environment {name!r}; choose one of {', '.join(environment_names())}"
        ) from None


def create_environment(name: str, raw_options: Mapping[str, str] | None = None) -> Environment:
    """A fresh environment ``name`` with options parsed from strings (CLI ``--opt k=v``)."""
    entry = environment_entry(name)
    options = parse_options(entry.options, raw_options or {}, what=f"environment {name!r}")
    return entry.factory(options)


def validate_task(name: str, task: Task) -> None:
    """Check that ``task`` fits environment ``name``; ``TaskError`` names the field if not."""
    environment_entry(name).validate_task(task)
