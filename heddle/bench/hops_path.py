"""Which of a window's calls carry the step, and the figures of their way through the files.

A window (``hops_trace``) holds every call into ``heddle/`` from the moment the tool executor
hands on a ``ToolReturned`` to the moment the worker's engine is asked to generate. Beside the
step, the same event loop runs what the step sets off and nothing waits for (the ledger
projector, the slower deciders' stages, acknowledgements, heartbeats, the nats client's reader
tasks). The step's *path* is the calls of three kinds of task, found from the record alone:

- **worker**: the task that calls ``generate`` and the tasks that created it, back to the first
  one created before the window (the command consumer): each counts until it creates the next;
- **control plane**: the tasks that handed the step's ``ContinueTrajectory`` to a function of the
  package (the deciders' task, the task that publishes their commands) and the tasks that created
  them, back to the first one created before the window: a task that created another of them
  counts until it did;
- **tools**: the task that handed on the ``ToolReturned`` (the tool executor).

A task of the path that creates none of the others hands the step on through the bus: it counts
from its first call in the window to the end of the loop step in which a function of it was
last handed the step's message (first called with it: a coroutine resumed once the server
acknowledged the message does not count again), when it gives the loop back with the message
written; what it does once the acknowledgement comes back runs beside the step.

The nats client's reader tasks are left out: they run the bus's receiving code (``wire``,
``pull``) for every message of a connection, the step's among them, and the step's own tasks
visit those files anyway.

Figures: the files in the order the path first opens them; its hops, the changes of file between
consecutive calls; and its returns, the hops into a file it had left before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from heddle.bench.hops_trace import NO_TASK, Call, Window

TOOLS_PART = "tools"
CONTROL_PLANE_PART = "control plane"
WORKER_PART = "worker"


@dataclass(frozen=True, slots=True)
class HopFigures:
    files: list[str]
    """In the order they were first opened."""
    num_hops: int
    """Changes of file between consecutive calls."""
    returns: list[str]
    """The hops into a file left before (``from -> to``), in order."""

    @property
    def num_files(self) -> int:
        return len(self.files)

    @property
    def num_returns(self) -> int:
        return len(self.returns)


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """A task that ran in the window, and what of it is counted."""

    task: str
    """What it runs (its coroutine's name), or ``outside a task``."""
    part: str
    """``tools``, ``control plane``, ``worker``; "" for a task beside the path."""
    num_calls: int
    files: list[str]


def hop_figures(files_in_call_order: Iterable[str]) -> HopFigures:
    """The figures of a sequence of calls, given by the file of each."""
    visited: list[str] = []
    seen: set[str] = set()
    returns: list[str] = []
    num_hops = 0
    current: str | None = None
    for file in files_in_call_order:
        if file == current:
            continue
        if current is not None:
            num_hops += 1
            if file in seen:
                returns.append(f"{current} -> {file}")
        if file not in seen:
            seen.add(file)
            visited.append(file)
        current = file
    return HopFigures(visited, num_hops, returns)


def path_parts(window: Window) -> dict[int, str]:
    """Task -> its part of the path, for the tasks on it."""
    parts = {task: WORKER_PART for task in _lineage(window, window.end_task)}
    for handing_over in sorted(window.handover_tasks):
        for task in _lineage(window, handing_over):
            parts.setdefault(task, CONTROL_PLANE_PART)
    parts.setdefault(window.start_task, TOOLS_PART)
    parts.pop(NO_TASK, None)
    return parts


def path_calls(window: Window) -> list[Call]:
    """The calls that carry the step, in the order they ran."""
    parts = path_parts(window)
    spans = {task: _span(window, parts, task) for task in parts}
    return [
        call
        for index, call in enumerate(window.calls)
        if call.task in spans and spans[call.task].holds(index, call)
    ]


def task_summaries(window: Window) -> list[TaskSummary]:
    """Every task that ran in the window, in the order it first ran: the path's with their
    counted calls, the others with all of theirs."""
    parts = path_parts(window)
    on_path = {id(call) for call in path_calls(window)}
    by_task: dict[int, list[Call]] = {}
    for call in window.calls:
        if call.task not in parts or id(call) in on_path:
            by_task.setdefault(call.task, []).append(call)
    return [
        TaskSummary(
            task=window.tasks.get(task, "outside a task"),
            part=parts.get(task, ""),
            num_calls=len(calls),
            files=hop_figures(call.file for call in calls).files,
        )
        for task, calls in by_task.items()
    ]


def _lineage(window: Window, task: int) -> list[int]:
    """``task`` and the tasks that created it, back to the first created before the window."""
    chain = [task]
    while task in window.births:
        parent = window.births[task].parent
        if parent is None:
            break
        chain.append(parent)
        task = parent
    return chain


@dataclass(frozen=True, slots=True)
class _Span:
    """Which calls of a task of the path carry the step."""

    until: int | None = None
    """Those before this index (it created the next task of the path there)."""
    loop_steps: tuple[int, int] | None = None
    """Those of these loop steps, first and last (it hands the step on through the bus: from
    its first call to the end of the loop step in which it was last handed the step's message,
    when it gives the loop back)."""

    def holds(self, index: int, call: Call) -> bool:
        if self.until is not None:
            return index < self.until
        if self.loop_steps is None:
            return True
        first, last = self.loop_steps
        return first <= call.loop_step <= last


def _span(window: Window, parts: dict[int, str], task: int) -> _Span:
    births = window.births.items()
    children_born = [birth.at for child, birth in births if birth.parent == task and child in parts]
    if children_born:
        return _Span(until=min(children_born))
    if task == window.end_task:
        return _Span()
    steps = [call.loop_step for call in window.calls if call.task == task]
    carrying = [call.loop_step for call in window.calls if call.task == task and call.carries]
    if not steps:
        return _Span()
    return _Span(loop_steps=(steps[0], max(carrying, default=steps[0])))
