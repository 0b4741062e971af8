"""The JSONL trace format: one trajectory per line (docs/design.md, "Simulator and trace format").

    {"id": "t17", "group": "p3", "prompt_tokens": 812,
     "steps": [{"output_tokens": 420, "tool_s": 1.7, "tool_output_tokens": 230,
                "output_text": "Plan: edit parser.py ...", "tool_text": "2 failed ..."}, ...]}

A step is one generation followed by (unless it is the last) one tool call whose result adds
``tool_output_tokens`` to the context. ``output_text`` (what the model wrote) and ``tool_text``
(what its tool returned) are optional: empty when unknown, left out of the file when empty, so
traces without text read and write as before; the context predictor reads them. Synthetic
workloads write this format (``heddle.workloads.text`` adds their text), ``heddle replay
--export-trace`` writes it from a recorded rollout, and the simulator, the ``trace`` environment
and the oracle predictor read it. A bad file raises ``TraceError`` naming the line and the field.
A path ending in ``.gz`` is read and written gzip-compressed (the regression corpus,
``heddle.experiments.corpus``, keeps its traces so; written with no timestamp, so the same trace
gives the same bytes).

Bounds (a line past them is refused, not run): a line holds at most ``MAX_LINE_BYTES``; a
trajectory's whole context (prompt, generations, observations) at most ``MAX_CONTEXT_TOKENS``
tokens; a tool call at most ``MAX_TOOL_S`` model seconds. A trace that asks more is a mistake
(a huge integer, a unit slip), and would otherwise run forever or fail inside a worker.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import msgspec

TRACE_ENVIRONMENT = "trace"
"""The environment of a trajectory replayed from a trace: its task holds the trace's steps."""
MAX_LINE_BYTES = 1024 * 1024
"""Longest line of a trace (or task) file: one trajectory, as large as NATS's default message."""
MAX_CONTEXT_TOKENS = 1 << 24
"""Most tokens a trace trajectory's context may reach (16,777,216: beyond any model's)."""
MAX_TOOL_S = 86_400.0
"""Longest recorded tool call, in model seconds (one day)."""


class TraceStep(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    output_tokens: int
    tool_s: float = 0.0
    tool_output_tokens: int = 0
    output_text: str = ""
    """What the model generated at this step ("" when not recorded)."""
    tool_text: str = ""
    """What the step's tool call returned ("" when not recorded, and after the last step)."""


class TraceTrajectory(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: str
    group: str = ""
    prompt_tokens: int
    steps: list[TraceStep]

    @property
    def num_output_tokens(self) -> int:
        return sum(step.output_tokens for step in self.steps)

    @property
    def tool_s(self) -> float:
        return sum(step.tool_s for step in self.steps)

    @property
    def has_text(self) -> bool:
        """Whether any step carries recorded text."""
        return any(step.output_text or step.tool_text for step in self.steps)

    @property
    def num_context_tokens(self) -> int:
        """Final context length: prompt + every generation + every tool observation."""
        return self.prompt_tokens + sum(s.output_tokens + s.tool_output_tokens for s in self.steps)


class TraceError(ValueError):
    """A trace file that does not follow the format; the message names the line and field."""


_decoder = msgspec.json.Decoder(TraceTrajectory)
_encoder = msgspec.json.Encoder()


def _check(trajectory: TraceTrajectory) -> str | None:
    """The first semantic problem of a decoded line, as 'field: reason', or None."""
    if not trajectory.id:
        return "id: must not be empty"
    if not 0 <= trajectory.prompt_tokens <= MAX_CONTEXT_TOKENS:
        return f"prompt_tokens: must be in [0, {MAX_CONTEXT_TOKENS}]"
    if not trajectory.steps:
        return "steps: needs at least one step"
    for index, step in enumerate(trajectory.steps):
        if step.output_tokens < 0:
            return f"steps[{index}].output_tokens: must be >= 0"
        if step.tool_output_tokens < 0:
            return f"steps[{index}].tool_output_tokens: must be >= 0"
        if not math.isfinite(step.tool_s) or not 0 <= step.tool_s <= MAX_TOOL_S:
            return f"steps[{index}].tool_s: must be a number of seconds in [0, {MAX_TOOL_S:g}]"
    if trajectory.num_context_tokens > MAX_CONTEXT_TOKENS:
        return (
            f"steps: the context reaches {trajectory.num_context_tokens} tokens, more than "
            f"{MAX_CONTEXT_TOKENS}"
        )
    return None


def parse_trace_line(
    line: str | bytes, line_number: int = 1, source: str = "trace"
) -> TraceTrajectory:
    try:
        trajectory = _decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise TraceError(f"{source}:{line_number}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise TraceError(f"{source}:{line_number}: not valid JSON ({exc})") from None
    problem = _check(trajectory)
    if problem:
        raise TraceError(f"{source}:{line_number}: {problem}")
    return trajectory


def iter_lines(path: Path, what: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a JSONL file (gzip'd when its name ends in ``.gz``), blank lines
    skipped; ``ValueError`` for a line over ``MAX_LINE_BYTES`` (read no further than that: a
    runaway line is not loaded whole) or a corrupt compressed file."""
    try:
        handle = _open(path, "rb")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read {what} ({exc.strerror})") from None
    with handle:
        line_number = 0
        while line := _readline(handle, path, what):
            line_number += 1
            if len(line.rstrip(b"\r\n")) > MAX_LINE_BYTES:
                raise ValueError(
                    f"{path}:{line_number}: the line is longer than {MAX_LINE_BYTES} bytes "
                    "(one trajectory or task per line)"
                )
            if line.strip():
                yield line_number, line


def iter_trace(path: Path) -> Iterator[TraceTrajectory]:
    """Trajectories of a JSONL trace file, in order; blank lines are skipped."""
    seen: set[str] = set()
    try:
        for line_number, line in iter_lines(path, "trace file"):
            trajectory = parse_trace_line(line, line_number, str(path))
            if trajectory.id in seen:
                raise TraceError(f"{path}:{line_number}: id: duplicate id {trajectory.id!r}")
            seen.add(trajectory.id)
            yield trajectory
    except TraceError:
        raise
    except ValueError as exc:
        raise TraceError(str(exc)) from None


def read_trace(path: Path) -> list[TraceTrajectory]:
    trajectories = list(iter_trace(path))
    if not trajectories:
        raise TraceError(f"{path}: the trace holds no trajectories")
    return trajectories


def write_trace(path: Path, trajectories: Iterable[TraceTrajectory]) -> int:
    """Write trajectories as JSONL; returns how many were written."""
    count = 0
    with _open(path, "wb") as handle:
        for trajectory in trajectories:
            handle.write(_encoder.encode(trajectory))
            handle.write(b"\n")
            count += 1
    return count


def _readline(handle: BinaryIO, path: Path, what: str) -> bytes:
    """The next line of ``handle``, read no further than ``MAX_LINE_BYTES`` past its start;
    a corrupt compressed file is a ``ValueError``."""
    try:
        return handle.readline(MAX_LINE_BYTES + 2)
    except (OSError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read {what} ({exc})") from None


def _open(path: Path, mode: str) -> BinaryIO:
    """``path`` opened in binary ``mode``, through gzip when it ends in ``.gz``."""
    if path.suffix == ".gz":
        return gzip.GzipFile(path, mode, mtime=0)  # type: ignore[return-value]
    return path.open(mode)  # type: ignore[return-value]
