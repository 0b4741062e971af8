"""A recorded rollout as Gantt segments: where each trajectory spent its time, on which worker.

Pure fold over the rollout's events (the stream is the source of truth; the simulator's
recorded events work too). Times are model seconds since the rollout was submitted:
``(occurred_at - submitted_at) * time_scale``; durations inside events are already model time.

The kinds are the breakdown's columns (``heddle.sim.accounting``, ``heddle.rollout.slowest``).
For each step of a trajectory, from the moment it could run (its submission, the previous tool's
return, the end of a migration) to its ``Generated``:

- ``admission`` (first step) / ``held`` (later steps): until the control plane decided to run it
  (its ``TrajectoryPlaced``, or ``GenerationStarted.command_issued_at``);
- ``control``: the command's way to the worker and the worker's handling (every other wait
  before the engine);
- ``weights``, ``queue``, ``prefill``, ``decode``: ``Generated.weights_wait_s``, ``queue_s``,
  ``prefill_s`` and ``decode_s``, back to back before ``Generated`` (on its worker);
- ``tool_queue``: from its generation to the tool's start (``ToolReturned`` minus the tool's
  own duration): the call's way to an executor and its wait for one;
- ``tool``: the tool's own duration (drawn on the worker that called it, which holds no GPU for
  it meanwhile);
- ``migration``: the transfer before ``Migrated`` (on the target worker); a step ready before
  its move began (its tool returned, its continue or move command on its way) waited for the
  control plane until then, drawn as ``held`` and ``control`` on its source worker.

So a trajectory's segments cover its whole life; what only a migration covers is the transfer
its tool gap did not hide.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from heddle.events import (
    Event,
    Generated,
    GenerationStarted,
    Migrated,
    RolloutFinished,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectoryPlaced,
    TrajectorySubmitted,
)


class SegmentKind(enum.Enum):
    ADMISSION = "admission"
    HELD = "held"
    CONTROL = "control"
    WEIGHTS = "weights"
    QUEUE = "queue"
    PREFILL = "prefill"
    DECODE = "decode"
    TOOL_QUEUE = "tool_queue"
    TOOL = "tool"
    MIGRATION = "migration"


@dataclass(frozen=True, slots=True)
class Segment:
    traj_id: str
    worker_id: str
    kind: SegmentKind
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class Timeline:
    """A rollout's segments (in the order they were derived) and what frames them."""

    rollout_id: str
    policy: str
    time_scale: float
    segments: list[Segment]
    makespan_s: float
    """The recorded makespan (``RolloutFinished``), else the end of the last segment."""

    @property
    def worker_ids(self) -> list[str]:
        return sorted({segment.worker_id for segment in self.segments})


@dataclass(slots=True)
class _Trajectory:
    ready_s: float = 0.0
    """When the next generation could start."""
    decided_s: float | None = None
    """When the control plane decided to run the next step (None: at once)."""
    generated_s: float = 0.0
    """When its last generation ended (its tool call's wait starts there)."""
    has_started: bool = False
    tool_calls: dict[int, tuple[str, float]] = field(default_factory=dict)
    """Step -> (worker, called at) of tool calls not yet returned."""
    generated_steps: set[int] = field(default_factory=set)
    """Steps already drawn (a step re-published outside the duplicate window counts once)."""


class _Builder:
    def __init__(self) -> None:
        self.rollout_id = ""
        self.policy = ""
        self.time_scale = 1.0
        self.origin_s: float | None = None
        self.makespan_s = 0.0
        self.segments: list[Segment] = []
        self.trajectories: dict[str, _Trajectory] = {}

    def at(self, occurred_at: float) -> float:
        if self.origin_s is None:
            self.origin_s = occurred_at
        return (occurred_at - self.origin_s) * self.time_scale

    def trajectory(self, traj_id: str) -> _Trajectory:
        found = self.trajectories.get(traj_id)
        if found is None:
            found = self.trajectories[traj_id] = _Trajectory()
        return found

    def add(
        self, traj_id: str, worker_id: str, kind: SegmentKind, start_s: float, end_s: float
    ) -> None:
        if end_s > start_s:
            self.segments.append(Segment(traj_id, worker_id, kind, start_s, end_s))

    def apply(self, event: Event) -> None:
        match event:
            case RolloutSubmitted():
                self.rollout_id, self.policy = event.rollout_id, event.policy
                self.time_scale = event.time_scale
                self.origin_s = event.occurred_at
            case RolloutFinished():
                self.makespan_s = event.makespan_s
            case TrajectorySubmitted():
                state = self.trajectory(event.traj_id)
                state.ready_s = max(state.ready_s, self.at(event.occurred_at))
            case TrajectoryPlaced():
                state = self.trajectory(event.traj_id)
                if not state.has_started and state.decided_s is None:
                    state.decided_s = self.at(event.occurred_at)
            case GenerationStarted() if event.command_issued_at > 0.0:
                state = self.trajectory(event.traj_id)
                if event.step not in state.generated_steps:
                    state.decided_s = self.at(event.command_issued_at)
            case Generated():
                self._generated(event)
            case ToolCalled():
                called = (event.worker_id, self.at(event.occurred_at))
                self.trajectory(event.traj_id).tool_calls[event.step] = called
            case ToolReturned():
                self._tool_returned(event)
            case Migrated():
                self._migrated(event)

    def _generated(self, event: Generated) -> None:
        state = self.trajectory(event.traj_id)
        if event.step in state.generated_steps:
            return
        state.generated_steps.add(event.step)
        ready_s, end_s = state.ready_s, max(state.ready_s, self.at(event.occurred_at))
        engine = (
            (SegmentKind.DECODE, event.decode_s),
            (SegmentKind.PREFILL, event.prefill_s),
            (SegmentKind.QUEUE, event.queue_s),
            (SegmentKind.WEIGHTS, event.weights_wait_s),
        )
        cursor_s = end_s
        for kind, duration_s in engine:  # back to back, ending at the result
            start_s = max(ready_s, cursor_s - duration_s)
            self.add(event.traj_id, event.worker_id, kind, start_s, cursor_s)
            cursor_s = start_s
        self._wait(state, event.traj_id, event.worker_id, cursor_s)
        state.has_started, state.decided_s = True, None
        state.ready_s = state.generated_s = end_s

    def _wait(self, state: _Trajectory, traj_id: str, worker_id: str, until_s: float) -> None:
        """Its step was ready from ``state.ready_s`` to ``until_s`` and waited for the control
        plane: held (or not yet admitted) until the decision, then the command's way."""
        hold = SegmentKind.HELD if state.has_started else SegmentKind.ADMISSION
        decided_s = min(max(state.ready_s, state.decided_s or state.ready_s), until_s)
        self.add(traj_id, worker_id, hold, state.ready_s, decided_s)
        self.add(traj_id, worker_id, SegmentKind.CONTROL, decided_s, until_s)

    def _migrated(self, event: Migrated) -> None:
        state = self.trajectory(event.traj_id)
        end_s = self.at(event.occurred_at)
        start_s = max(0.0, end_s - event.transfer_s)
        if not state.tool_calls:  # its step was ready before the move began (on its source)
            self._wait(state, event.traj_id, event.source_worker_id, start_s)
        self.add(event.traj_id, event.target_worker_id, SegmentKind.MIGRATION, start_s, end_s)
        state.ready_s = max(state.ready_s, end_s)

    def _tool_returned(self, event: ToolReturned) -> None:
        state = self.trajectory(event.traj_id)
        called = state.tool_calls.pop(event.step, None)
        if called is None:
            return  # a duplicate return, or a call recorded before this replay began
        worker_id, called_s = called
        waited_from_s = min(state.generated_s or called_s, called_s)
        end_s = max(called_s, self.at(event.occurred_at))
        tool_start_s = max(waited_from_s, end_s - event.duration_s)
        self.add(event.traj_id, worker_id, SegmentKind.TOOL_QUEUE, waited_from_s, tool_start_s)
        self.add(event.traj_id, worker_id, SegmentKind.TOOL, tool_start_s, end_s)
        state.ready_s = max(state.ready_s, end_s)


def build_timeline(events: Iterable[Event]) -> Timeline:
    """Segments of the rollout whose events (in stream order) are given."""
    builder = _Builder()
    for event in events:
        builder.apply(event)
    last_end_s = max((s.end_s for s in builder.segments), default=0.0)
    return Timeline(
        rollout_id=builder.rollout_id,
        policy=builder.policy,
        time_scale=builder.time_scale,
        segments=builder.segments,
        makespan_s=builder.makespan_s or last_end_s,
    )
