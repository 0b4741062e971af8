"""Record the Python calls into ``heddle/`` from a tool result to the next generation.

A ``StepTracer`` is a profile hook (``sys.setprofile``) and an asyncio task factory. It opens a
window when a ``ToolReturned`` it has not seen is first handed to a function of the package (the
tool executor publishing it: the result is in hand), and closes it when an ``Engine``'s
``generate`` is called (``heddle.workers.engines.base``): the next generation starts. Both ends
are found by what is passed, not by the names of the functions between them, so the trace
survives a rewrite of the code it measures. In the window it records every call of a function
defined under ``heddle/``, ``heddle/bench`` aside (coroutine resumptions included: a profile
hook sees them as calls), with the task it ran on and the event-loop step it ran in (a step is
one callback of the loop: one task running until it awaits); and every task created, with the
task that created it. Which of those calls carry the step is decided later, from the record
alone (``hops_path``).

The hook costs a few microseconds a call: run it on a small deployment (``hops``), never in a
measurement of time.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import weakref
from asyncio import events
from collections.abc import Coroutine, Generator
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import heddle
from heddle.events import ContinueTrajectory, ToolReturned
from heddle.workers.engines.base import Engine

PACKAGE_ROOT = Path(heddle.__file__).resolve().parent
_MEASURING = PACKAGE_ROOT / "bench"
"""Left out: the benchmarks' own code (this tracer's task factory runs on the tasks it sees)."""
_HANDLE_RUN: CodeType = events.Handle._run.__code__
"""Every loop step (a task's step, a callback) starts in ``Handle._run``."""
_MAX_SCANNED_ITEMS = 64
"""Elements of a list or tuple argument looked at for the hand-over command."""
_Awaitable = Coroutine[Any, Any, Any] | Generator[Any, None, Any]
NO_TASK = -1
"""``Call.task`` of a call outside any task: a plain loop callback, or another thread (the
thread pool)."""


@dataclass(frozen=True, slots=True)
class Call:
    task: int
    """The task it ran on (its number in ``Window.tasks``), or ``NO_TASK``."""
    file: str
    """Relative to the repository: ``heddle/bus/bus.py``."""
    function: str
    loop_step: int
    """The event-loop step it ran in (0: the one the window opened in)."""
    carries: bool = False
    """It was handed the step's ``ToolReturned`` or its ``ContinueTrajectory`` (a coroutine
    resumed with one in its arguments carries it once, when first called)."""


@dataclass(frozen=True, slots=True)
class Birth:
    parent: int | None
    """The task that created it (None: created outside a task)."""
    at: int
    """How many calls the window held when it was created."""


@dataclass(frozen=True, slots=True)
class Window:
    """The calls of one tool result's way to the next generation."""

    calls: tuple[Call, ...]
    """In the order they ran; the first received the ``ToolReturned``, the last is
    ``generate``."""
    tasks: dict[int, str]
    """Task number -> what it runs (its coroutine's name)."""
    births: dict[int, Birth]
    """The tasks created in the window."""
    handover_tasks: frozenset[int]
    """The tasks that handed the step's ``ContinueTrajectory`` to a function of the package."""
    step: int
    """The step the ``ToolReturned`` answers."""

    @property
    def start_task(self) -> int:
        return self.calls[0].task

    @property
    def end_task(self) -> int:
        return self.calls[-1].task


@dataclass
class _Open:
    step: int
    event_id: str
    """The ``ToolReturned``'s."""
    calls: list[Call] = field(default_factory=list)
    births: dict[int, Birth] = field(default_factory=dict)
    handover_tasks: set[int] = field(default_factory=set)
    loop_step: int = 0
    carried_by: dict[int, FrameType] = field(default_factory=dict)
    """The frames that carried the step (kept, so that a resumed one is known by its id)."""


class StepTracer:
    """Install with ``with tracer.installed():`` inside the event loop that runs the deployment;
    ``windows`` holds each closed window, in order."""

    def __init__(self) -> None:
        self.windows: list[Window] = []
        self._files: dict[CodeType, str | None] = {}
        self._numbers: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = (
            weakref.WeakKeyDictionary()
        )
        self._names: dict[int, str] = {}
        self._seen: set[str] = set()
        self._open: _Open | None = None

    # ---- installing -------------------------------------------------------------------------

    def installed(self) -> _Installed:
        return _Installed(self)

    def task_factory(
        self, loop: asyncio.AbstractEventLoop, coro: _Awaitable, **kwargs: Any
    ) -> asyncio.Task[Any]:
        parent = self._task_number()
        task = asyncio.Task(coro, loop=loop, **kwargs)
        window = self._open
        if window is not None:
            window.births[self._number_of(task)] = Birth(parent, len(window.calls))
        return task

    # ---- the hook ---------------------------------------------------------------------------

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        code = frame.f_code
        window = self._open
        if code is _HANDLE_RUN:
            if window is not None:
                window.loop_step += 1
            return
        file = self._file_of(code)
        if file is None:
            return
        if window is None:
            window = self._opened(frame)
            if window is None:
                return
        task = self._task_number()
        task = NO_TASK if task is None else task
        carried = _carried(frame, window.event_id)
        if carried is ContinueTrajectory:
            window.handover_tasks.add(task)
        carries = carried is not None and id(frame) not in window.carried_by
        if carries:
            window.carried_by[id(frame)] = frame
        window.calls.append(Call(task, file, code.co_qualname, window.loop_step, carries))
        if code.co_name == "generate" and isinstance(_first_argument(frame), Engine):
            self._close(window)

    def _opened(self, frame: FrameType) -> _Open | None:
        for value in _arguments(frame):
            if isinstance(value, ToolReturned) and value.event_id not in self._seen:
                self._seen.add(value.event_id)
                self._open = _Open(step=value.step, event_id=value.event_id)
                return self._open
        return None

    def _close(self, window: _Open) -> None:
        self.windows.append(
            Window(
                calls=tuple(window.calls),
                tasks={number: self._names[number] for number in _tasks_of(window)},
                births=window.births,
                handover_tasks=frozenset(window.handover_tasks),
                step=window.step,
            )
        )
        self._open = None

    # ---- identities -------------------------------------------------------------------------

    def _file_of(self, code: CodeType) -> str | None:
        try:
            return self._files[code]
        except KeyError:
            path = Path(code.co_filename).resolve()
            inside = path.is_relative_to(PACKAGE_ROOT) and not path.is_relative_to(_MEASURING)
            file = str(path.relative_to(PACKAGE_ROOT.parent)) if inside else None
            self._files[code] = file
            return file

    def _task_number(self) -> int | None:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # another thread: no running loop there
            return None
        return None if task is None else self._number_of(task)

    def _number_of(self, task: asyncio.Task[Any]) -> int:
        number = self._numbers.get(task)
        if number is None:
            number = self._numbers[task] = len(self._names)
            self._names[number] = getattr(task.get_coro(), "__qualname__", task.get_name())
        return number


class _Installed:
    def __init__(self, tracer: StepTracer) -> None:
        self.tracer = tracer

    def __enter__(self) -> StepTracer:
        loop = asyncio.get_running_loop()
        self._previous = (loop.get_task_factory(), sys.getprofile(), threading.getprofile())
        loop.set_task_factory(self.tracer.task_factory)
        threading.setprofile(self.tracer.profile)
        sys.setprofile(self.tracer.profile)
        return self.tracer

    def __exit__(self, *exc_info: object) -> None:
        factory, profile, thread_profile = self._previous
        sys.setprofile(profile)
        threading.setprofile(thread_profile)
        asyncio.get_running_loop().set_task_factory(factory)


def _arguments(frame: FrameType) -> list[object]:
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    if not names:
        return []
    local_values = frame.f_locals
    return [local_values.get(name) for name in names]


def _first_argument(frame: FrameType) -> object:
    values = _arguments(frame)
    return values[0] if values else None


def _carried(frame: FrameType, event_id: str) -> type[ContinueTrajectory | ToolReturned] | None:
    """Which of the step's messages ``frame`` was handed: a ``ContinueTrajectory`` (or a list or
    tuple holding one), the ``ToolReturned`` of ``event_id``, or neither."""
    for value in _arguments(frame):
        if isinstance(value, ContinueTrajectory):
            return ContinueTrajectory
        if isinstance(value, ToolReturned) and value.event_id == event_id:
            return ToolReturned
        if isinstance(value, (list, tuple)) and any(
            isinstance(item, ContinueTrajectory) for item in value[:_MAX_SCANNED_ITEMS]
        ):
            return ContinueTrajectory
    return None


def _tasks_of(window: _Open) -> set[int]:
    numbers = {call.task for call in window.calls} | set(window.births)
    numbers |= {birth.parent for birth in window.births.values() if birth.parent is not None}
    return numbers - {NO_TASK}
