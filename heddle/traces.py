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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec


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
    if trajectory.prompt_tokens < 0:
        return "prompt_tokens: must be >= 0"
    if not trajectory.steps:
        return "steps: needs at least one step"
    for index, step in enumerate(trajectory.steps):
        if step.output_tokens < 0:
            return f"steps[{index}].output_tokens: must be >= 0"
        if step.tool_output_tokens < 0:
            return f"steps[{index}].tool_output_tokens: must be >= 0"
        if not math.isfinite(step.tool_s) or step.tool_s < 0:
            return f"steps[{index}].tool_s: must be a finite number >= 0"
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


def iter_trace(path: Path) -> Iterator[TraceTrajectory]:
    """Trajectories of a JSONL trace file, in order; blank lines are skipped."""
    seen: set[str] = set()
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise TraceError(f"{path}: cannot open trace file ({exc.strerror})") from None
    with handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            trajectory = parse_trace_line(line, line_number, str(path))
            if trajectory.id in seen:
                raise TraceError(f"{path}:{line_number}: id: duplicate id {trajectory.id!r}")
            seen.add(trajectory.id)
            yield trajectory


def read_trace(path: Path) -> list[TraceTrajectory]:
    trajectories = list(iter_trace(path))
    if not trajectories:
        raise TraceError(f"{path}: the trace holds no trajectories")
    return trajectories


def write_trace(path: Path, trajectories: Iterable[TraceTrajectory]) -> int:
    """Write trajectories as JSONL; returns how many were written."""
    count = 0
    with path.open("wb") as handle:
        for trajectory in trajectories:
            handle.write(_encoder.encode(trajectory))
            handle.write(b"\n")
            count += 1
    return count
