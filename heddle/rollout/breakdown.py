"""Where a trajectory's live time went beyond what the cost model and the tools account for.

A trajectory's total (submission to end) is its modelled parts (the worker's
``Completed.timings``: queue, prefill, decode, tool, migration) plus the rest, which this module
splits from the timestamps of the trajectory's own events: each stamped by its publisher
(``occurred_at``), by the stream server when stored (``stored_at`` of the replayed record), or by
the worker when it took a command (``GenerationStarted.command_*_at``). The intervals tile the
trajectory's timeline from its submission to its end, so the parts sum to the total (the
summary's ``other_s`` keeps what no interval explains: clock rounding, a step re-run after a
failure):

- ``admission`` (before its first step) and ``held`` (before a later one): the control plane
  held the trajectory: from its cause being stored to the event the start or continue was
  decided on (the command's ``issued_at``, ``GenerationStarted.command_issued_at``): KV
  admission or a concurrency cap waiting for room, a program paused between steps;
- ``messaging``: an event on its way into the stream (published -> stored: the submission, a
  tool result) and a command on its way to the worker (stored -> taken by the worker);
- ``control``: the control plane's reaction, from the event being stored to the command it
  caused being stored (its delivery to the control plane, its queue, the decision, the
  command's publish), less any hold above and any KV transfer in that gap (counted as
  migration);
- ``weights``: a generation waiting on its worker for a weight swap
  (``Generated.weights_wait_s``);
- ``reshard``: a step a re-shard interrupted (``GenerationInterrupted``): from its start to its
  ``Generated``, what its parts' engine time does not explain (the stop, the hand-over to the
  merged worker, its relaunch);
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
    GenerationInterrupted,
    GenerationStarted,
    Migrated,
    ToolCalled,
    ToolReturned,
    TrajectorySubmitted,
)


class TimeSplit(msgspec.Struct, frozen=True, kw_only=True):
    """Model seconds of one trajectory's time outside its modelled parts (module docstring)."""

    admission_s: float = 0.0
    held_s: float = 0.0
    weights_s: float = 0.0
    reshard_s: float = 0.0
    control_s: float = 0.0
    messaging_s: float = 0.0
    tool_queue_s: float = 0.0
    engine_lag_s: float = 0.0
    worker_lag_s: float = 0.0
    modelled_s: float = 0.0
    """Engine queue + prefill + decode, tool durations and KV transfers seen on the timeline."""
    span_s: float = 0.0
    """The span tiled: from the submission (or the first step, when the submission was not
    seen) to the end."""

    @property
    def holds_s(self) -> float:
        """The policy's and the trainer's holds: admission, held, weights, re-shards (not
        lag)."""
        return self.admission_s + self.held_s + self.weights_s + self.reshard_s

    @property
    def lag_s(self) -> float:
        """The workers' lag: engine lateness and the worker's own handling."""
        return self.engine_lag_s + self.worker_lag_s

    @property
    def overhead_s(self) -> float:
        """Everything but the modelled parts and the holds: the live system's own time."""
        return self.control_s + self.messaging_s + self.tool_queue_s + self.lag_s


@dataclass(slots=True)
class _Step:
    started_at: float = 0.0
    command_stored_at: float = 0.0
    command_received_at: float = 0.0
    command_issued_at: float = 0.0
    generated_at: float = 0.0
    engine_s: float = 0.0
    """Model seconds: the engine's queue + prefill + decode."""
    weights_wait_s: float = 0.0
    """Model seconds it waited for a weight swap before the engine took it."""
    is_interrupted: bool = False
    """A re-shard interrupted its generation (its parts' engine time is in ``engine_s``)."""
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
                step.command_issued_at = event.command_issued_at
            case Generated():
                step = self._step(event.step)
                step.generated_at = event.occurred_at
                step.engine_s += event.queue_s + event.prefill_s + event.decode_s
                step.weights_wait_s = event.weights_wait_s
            case GenerationInterrupted():
                step = self._step(event.step)
                step.engine_s += event.queue_s + event.prefill_s + event.decode_s
                step.is_interrupted = True
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
    admission: float = 0.0
    held: float = 0.0
    weights: float = 0.0
    reshard: float = 0.0
    control: float = 0.0
    messaging: float = 0.0
    tool_queue: float = 0.0
    engine_lag: float = 0.0
    worker_lag: float = 0.0
    modelled: float = 0.0

    def command(self, cause_at: float, cause_stored_at: float, step: _Step, is_first: bool) -> None:
        """The gap from the step's cause (an event; ``is_first``: the submission) to the
        worker starting it."""
        stored = cause_stored_at or cause_at
        transfer = self._transfer_between(stored, step.command_stored_at)
        reaction = _interval(step.command_stored_at - stored - transfer)
        hold = 0.0
        if step.command_issued_at > 0.0:  # decided on a later event: held until then
            hold = min(_interval(step.command_issued_at - stored), reaction)
        if is_first:
            self.admission += hold
        else:
            self.held += hold
        self.messaging += _interval(stored - cause_at)
        self.control += reaction - hold
        self.modelled += transfer
        self.messaging += _interval(step.command_received_at - step.command_stored_at)
        self.worker_lag += _interval(step.started_at - step.command_received_at)

    def _transfer_between(self, start: float, end: float) -> float:
        return sum(s for at, s in self.transfers if start <= at <= end) / self.scale

    def split(self) -> TimeSplit:
        scale = self.scale
        return TimeSplit(
            admission_s=self.admission * scale,
            held_s=self.held * scale,
            weights_s=self.weights * scale,
            reshard_s=self.reshard * scale,
            control_s=self.control * scale,
            messaging_s=self.messaging * scale,
            tool_queue_s=self.tool_queue * scale,
            engine_lag_s=self.engine_lag * scale,
            worker_lag_s=self.worker_lag * scale,
            modelled_s=self.modelled * scale,
        )

    def spanning(self, span: float) -> TimeSplit:
        return msgspec.structs.replace(self.split(), span_s=span * self.scale)


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
    origin, is_first = cursor, True
    for index in sorted(timeline.steps):
        step = timeline.steps[index]
        if not step.started_at or not step.generated_at:
            continue
        if step.command_stored_at > 0.0 and step.command_received_at > 0.0:
            tiling.command(cursor, cursor_stored, step, is_first)
        else:
            tiling.worker_lag += _interval(step.started_at - cursor)
        is_first = False
        engine_wall, weights_wall = step.engine_s / scale, step.weights_wait_s / scale
        tiling.modelled += engine_wall
        if step.is_interrupted:  # the gate's wait was the relaunch: all of it is the re-shard's
            tiling.reshard += _interval(step.generated_at - step.started_at - engine_wall)
        else:
            tiling.weights += weights_wall
            tiling.engine_lag += _interval(
                step.generated_at - step.started_at - engine_wall - weights_wall
            )
        cursor, cursor_stored = step.generated_at, 0.0
        if step.called_at and step.returned_at:
            tool_wall = step.tool_s / scale
            tiling.worker_lag += _interval(step.called_at - cursor)
            tiling.tool_queue += _interval(step.returned_at - tool_wall - step.called_at)
            tiling.modelled += tool_wall
            cursor, cursor_stored = step.returned_at, step.returned_stored_at
    tiling.worker_lag += _interval(completed_at - cursor)
    return tiling.spanning(completed_at - origin)


def _interval(wall_s: float) -> float:
    """A measured interval: a negative one is clocks disagreeing, and counts as none."""
    return max(0.0, wall_s)
