"""Where a trajectory's live time went beyond what the cost model and the tools account for.

A trajectory's total (``Completed.timings.total_s``: submission to end) is its modelled parts
(queue, prefill, decode, tool, migration) plus time the simulator does not have. This module
splits the rest from the timestamps of the trajectory's own events: each stamped by its
publisher (``occurred_at``), by the stream server when stored (``stored_at`` of the replayed
record), or by the worker when it took a command (``GenerationStarted.command_*_at``). The
intervals tile the trajectory's timeline from its submission to its end, so the parts sum to
the total (``other_s`` keeps what no interval explains: clock rounding, a step re-run after a
failure):

- ``messaging``: an event on its way into the stream (published -> stored: the submission, a
  tool result) and a command on its way to the worker (stored -> taken by the worker);
- ``control``: the control plane's reaction, from the event being stored to the command it
  caused being stored (its delivery to the control plane, its queue, the decision, the
  command's publish), less any KV transfer in that gap (counted as migration);
- ``tool_queue``: ``ToolCalled`` -> the tool's start (``ToolReturned`` minus the tool's own
  duration): the call's trip through the tools stream and the wait for an executor;
- ``engine_lag``: ``GenerationStarted`` -> ``Generated`` minus the engine's queue, prefill and
  decode: how late, against the scaled clock, the engine's results came (timer lateness of a
  sim engine, a busy event loop);
- ``worker_lag``: the worker's own handling (a command taken -> its step announced; a result ->
  its tool call; the last result -> the end).

Every wall interval counts ``time_scale`` times in model seconds: a live run keeps its time
scale only while these stay small. An interval is never negative: stamps of different clocks
(hosts that disagree, a wall clock against a monotonic one) can put an end before its start,
which counts as zero, the disagreement going to ``other_s``. Pure: feed it events (with the
stream's store times).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from heddle.events import (
    Event,
    Generated,
    GenerationStarted,
    Migrated,
    ToolCalled,
    ToolReturned,
    TrajectorySubmitted,
)


class TimeSplit(msgspec.Struct, frozen=True, kw_only=True):
    """Model seconds of one trajectory's time outside its modelled parts (module docstring)."""

    control_s: float = 0.0
    messaging_s: float = 0.0
    tool_queue_s: float = 0.0
    engine_lag_s: float = 0.0
    worker_lag_s: float = 0.0
    modelled_s: float = 0.0
    """Engine queue + prefill + decode, tool durations and KV transfers seen on the timeline."""

    @property
    def lag_s(self) -> float:
        """The workers' lag: engine lateness and the worker's own handling."""
        return self.engine_lag_s + self.worker_lag_s

    @property
    def overhead_s(self) -> float:
        """Everything the simulator does not have."""
        return self.control_s + self.messaging_s + self.tool_queue_s + self.lag_s


@dataclass(slots=True)
class _Step:
    started_at: float = 0.0
    command_stored_at: float = 0.0
    command_received_at: float = 0.0
    generated_at: float = 0.0
    engine_s: float = 0.0
    """Model seconds: the engine's queue + prefill + decode."""
    called_at: float = 0.0
    returned_at: float = 0.0
    returned_stored_at: float = 0.0
    tool_s: float = 0.0
    """Model seconds the tool ran."""


@dataclass(slots=True)
class TrajectoryTimeline:
    """The timestamps of one trajectory's events that the split needs (a few floats a step:
    a large rollout's timelines are kept for every trajectory)."""

    submitted_at: float = 0.0
    submitted_stored_at: float = 0.0
    steps: dict[int, _Step] = field(default_factory=dict)
    transfers: list[tuple[float, float]] = field(default_factory=list)
    """(wall time of ``Migrated``, model seconds of its KV transfer)."""

    def add(self, event: Event, stored_at: float = 0.0) -> None:
        match event:
            case TrajectorySubmitted():
                self.submitted_at, self.submitted_stored_at = event.occurred_at, stored_at
            case GenerationStarted():
                # A step re-run (after a re-placement) keeps its last start: the failed
                # attempt falls in the gap before it.
                step = self._step(event.step)
                step.started_at = event.occurred_at
                step.command_stored_at = event.command_stored_at
                step.command_received_at = event.command_received_at
            case Generated():
                step = self._step(event.step)
                step.generated_at = event.occurred_at
                step.engine_s = event.queue_s + event.prefill_s + event.decode_s
            case ToolCalled():
                self._step(event.step).called_at = event.occurred_at
            case ToolReturned():
                step = self._step(event.step)
                step.returned_at, step.returned_stored_at = event.occurred_at, stored_at
                step.tool_s = event.duration_s
            case Migrated():
                self.transfers.append((event.occurred_at, event.transfer_s))

    def _step(self, index: int) -> _Step:
        found = self.steps.get(index)
        if found is None:
            found = self.steps[index] = _Step()
        return found


@dataclass(slots=True)
class _Tiling:
    """Wall seconds per part, accumulated along the timeline."""

    scale: float
    transfers: list[tuple[float, float]]
    control: float = 0.0
    messaging: float = 0.0
    tool_queue: float = 0.0
    engine_lag: float = 0.0
    worker_lag: float = 0.0
    modelled: float = 0.0

    def command(self, cause_at: float, cause_stored_at: float, step: _Step) -> None:
        """The gap from the step's cause (an event) to the worker starting it."""
        stored = cause_stored_at or cause_at
        transfer = self._transfer_between(stored, step.command_stored_at)
        self.messaging += _interval(stored - cause_at)
        self.control += _interval(step.command_stored_at - stored - transfer)
        self.modelled += transfer
        self.messaging += _interval(step.command_received_at - step.command_stored_at)
        self.worker_lag += _interval(step.started_at - step.command_received_at)

    def _transfer_between(self, start: float, end: float) -> float:
        return sum(s for at, s in self.transfers if start <= at <= end) / self.scale

    def split(self) -> TimeSplit:
        scale = self.scale
        return TimeSplit(
            control_s=self.control * scale,
            messaging_s=self.messaging * scale,
            tool_queue_s=self.tool_queue * scale,
            engine_lag_s=self.engine_lag * scale,
            worker_lag_s=self.worker_lag * scale,
            modelled_s=self.modelled * scale,
        )


def split_time(
    timeline: TrajectoryTimeline,
    completed_at: float,
    time_scale: float,
    started_at: float | None = None,
) -> TimeSplit:
    """Tile ``timeline`` from its submission (or from ``started_at``, when later: where the
    worker's total starts, so the parts and that total cover the same span) to
    ``completed_at`` (see the module docstring)."""
    scale = time_scale if time_scale > 0 else 1.0
    tiling = _Tiling(scale, timeline.transfers)
    cursor, cursor_stored = timeline.submitted_at, timeline.submitted_stored_at
    if not cursor:  # submission not seen: start at the first step, as the worker's total does
        starts = [step.started_at for step in timeline.steps.values() if step.started_at]
        cursor, cursor_stored = min(starts, default=completed_at), 0.0
    if started_at is not None and started_at > cursor:
        cursor, cursor_stored = started_at, 0.0
    for index in sorted(timeline.steps):
        step = timeline.steps[index]
        if not step.started_at or not step.generated_at:
            continue
        if step.command_stored_at > 0.0 and step.command_received_at > 0.0:
            tiling.command(cursor, cursor_stored, step)
        else:
            tiling.worker_lag += _interval(step.started_at - cursor)
        engine_wall = step.engine_s / scale
        tiling.modelled += engine_wall
        tiling.engine_lag += _interval(step.generated_at - step.started_at - engine_wall)
        cursor, cursor_stored = step.generated_at, 0.0
        if step.called_at and step.returned_at:
            tool_wall = step.tool_s / scale
            tiling.worker_lag += _interval(step.called_at - cursor)
            tiling.tool_queue += _interval(step.returned_at - tool_wall - step.called_at)
            tiling.modelled += tool_wall
            cursor, cursor_stored = step.returned_at, step.returned_stored_at
    tiling.worker_lag += _interval(completed_at - cursor)
    return tiling.split()


def _interval(wall_s: float) -> float:
    """A measured interval: a negative one is clocks disagreeing, and counts as none."""
    return max(0.0, wall_s)
