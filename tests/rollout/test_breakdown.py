"""The slowest trajectory's breakdown: every interval of its timeline is attributed to one part
(modelled, admission, held, weights, control, messaging, tool queueing, engine lag, worker lag),
so the parts sum to its total; a run behind its scaled clock reports the lag and warns.
Timelines are built from gaps chosen by the test (or by hypothesis), and the expected parts are
summed from those gaps."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.events import (
    Completed,
    Event,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectorySpec,
    TrajectorySubmitted,
    TrajectoryTimings,
)
from heddle.rollout.breakdown import TrajectoryTimeline, split_time
from heddle.rollout.slowest import LAG_WARNING_FRACTION
from heddle.rollout.summary import RolloutSummary, summarize_rollout

SCALE = 100.0
START = 1_000.0
SPEC = TrajectorySpec(group_id="g", index=0, environment="trace")


@dataclass(frozen=True)
class StepGaps:
    """Wall seconds of one step's intervals, in timeline order."""

    publish_s: float  # the cause (submission / tool result) published -> stored
    control_s: float  # cause stored -> command stored
    delivery_s: float  # command stored -> taken by the worker
    handling_s: float  # command taken -> step announced
    engine_s: float  # the engine's modelled queue + prefill + decode
    engine_late_s: float  # results later than that
    to_tool_s: float  # result -> tool call
    tool_queue_s: float  # tool call -> tool start
    tool_s: float  # the tool's own duration
    hold_s: float = 0.0  # cause stored -> the event the command was decided on (a hold)
    weights_s: float = 0.0  # the generation waited for a weight swap


gap = st.floats(min_value=0.0, max_value=0.5)
step_gaps = st.builds(StepGaps, gap, gap, gap, gap, gap, gap, gap, gap, gap, gap, gap)


@dataclass
class Recorder:
    """Builds a trajectory's events (and their store times) from ``StepGaps``."""

    traj: str
    now: float = START
    events: list[Event] | None = None
    stored: list[float] | None = None

    def __post_init__(self) -> None:
        self.events, self.stored = [], []

    def add(self, event: Event, stored_at: float = 0.0) -> None:
        assert self.events is not None and self.stored is not None
        self.events.append(event)
        self.stored.append(stored_at)

    def trajectory(self, steps: list[StepGaps], tail_s: float) -> Completed:
        spec = TrajectorySpec(group_id="g", index=0, environment="trace")
        submitted = TrajectorySubmitted(
            event_id=f"{self.traj}:s", rollout_id="r", occurred_at=self.now, traj_id=self.traj,
            spec=spec,
        )  # fmt: skip
        cause_at = self.now
        pending_cause: tuple[Event, float] | None = (submitted, cause_at + steps[0].publish_s)
        for index, step in enumerate(steps):
            assert pending_cause is not None
            self.add(*pending_cause)
            stored_at = pending_cause[1]
            issued_at = stored_at + step.hold_s
            command_stored = issued_at + step.control_s
            received = command_stored + step.delivery_s
            started_at = received + step.handling_s
            self.add(self._started(index, started_at, command_stored, received, issued_at))
            generated_at = started_at + step.weights_s + step.engine_s + step.engine_late_s
            self.add(self._generated(index, generated_at, step.engine_s, step.weights_s))
            called_at = generated_at + step.to_tool_s
            self.add(self._called(index, called_at))
            returned_at = called_at + step.tool_queue_s + step.tool_s
            following = steps[index + 1] if index + 1 < len(steps) else None
            publish_s = following.publish_s if following is not None else 0.0
            returned = self._returned(index, returned_at, step.tool_s * SCALE)
            pending_cause = (returned, returned_at + publish_s)
            self.now = returned_at
        assert pending_cause is not None
        self.add(*pending_cause)
        completed_at = self.now + tail_s
        return self._completed(len(steps), completed_at, steps)

    def _started(
        self, step: int, at: float, stored: float, received: float, issued: float
    ) -> Event:
        return GenerationStarted(
            event_id=f"{self.traj}:{step}:gs", rollout_id="r", occurred_at=at,
            traj_id=self.traj, step=step, worker_id="w00", num_context_tokens=1,
            command_stored_at=stored, command_received_at=received, command_issued_at=issued,
        )  # fmt: skip

    def _generated(self, step: int, at: float, engine_s: float, weights_s: float) -> Event:
        return Generated(
            event_id=f"{self.traj}:{step}:g", rollout_id="r", occurred_at=at, traj_id=self.traj,
            step=step, worker_id="w00", output_token_ids=[1], decode_s=engine_s * SCALE,
            weights_wait_s=weights_s * SCALE,
        )  # fmt: skip

    def _called(self, step: int, at: float) -> Event:
        return ToolCalled(
            event_id=f"{self.traj}:{step}:tc", rollout_id="r", occurred_at=at, traj_id=self.traj,
            step=step, worker_id="w00", call_id=f"c{step}", tool="trace",
        )  # fmt: skip

    def _returned(self, step: int, at: float, tool_model_s: float) -> Event:
        return ToolReturned(
            event_id=f"{self.traj}:{step}:tr", rollout_id="r", occurred_at=at, traj_id=self.traj,
            step=step, call_id=f"c{step}", tool="trace", status="ok", duration_s=tool_model_s,
        )  # fmt: skip

    def _completed(self, num_steps: int, at: float, steps: list[StepGaps]) -> Completed:
        timings = TrajectoryTimings(
            decode_s=sum(s.engine_s for s in steps) * SCALE,
            tool_s=sum(s.tool_s for s in steps) * SCALE,
            total_s=max(0.0, at - START) * SCALE,  # the worker's one clock: never negative
        )
        completed = Completed(
            event_id=f"{self.traj}:c", rollout_id="r", occurred_at=at, traj_id=self.traj,
            num_steps=num_steps, timings=timings, worker_history=["w00"],
        )  # fmt: skip
        self.add(completed)
        return completed


def rollout_submitted() -> RolloutSubmitted:
    return RolloutSubmitted(
        event_id="r:s", rollout_id="r", occurred_at=START, policy="heddle", num_trajectories=1,
        time_scale=SCALE,
    )  # fmt: skip


def summary_of(steps: list[StepGaps], tail_s: float = 0.0) -> RolloutSummary:
    recorder = Recorder("t0")
    recorder.trajectory(steps, tail_s)
    assert recorder.events is not None and recorder.stored is not None
    return summarize_rollout("r", [rollout_submitted(), *recorder.events], [0.0, *recorder.stored])


@settings(max_examples=60)
@given(st.lists(step_gaps, min_size=1, max_size=6), gap)
def test_the_parts_are_each_measured_and_sum_to_the_total(
    steps: list[StepGaps], tail_s: float
) -> None:
    slow = summary_of(steps, tail_s).slowest
    assert slow is not None
    approx = pytest.approx  # float rounding only: the gaps are exact by construction
    assert slow.admission_s == approx(steps[0].hold_s * SCALE, abs=1e-6)
    assert slow.held_s == approx(sum(s.hold_s for s in steps[1:]) * SCALE, abs=1e-6)
    assert slow.weights_s == approx(sum(s.weights_s for s in steps) * SCALE, abs=1e-6)
    assert slow.control_s == approx(sum(s.control_s for s in steps) * SCALE, abs=1e-6)
    assert slow.messaging_s == approx(
        sum(s.publish_s + s.delivery_s for s in steps) * SCALE, abs=1e-6
    )
    assert slow.tool_queue_s == approx(sum(s.tool_queue_s for s in steps) * SCALE, abs=1e-6)
    assert slow.engine_lag_s == approx(sum(s.engine_late_s for s in steps) * SCALE, abs=1e-6)
    assert slow.worker_lag_s == approx(
        (sum(s.handling_s + s.to_tool_s for s in steps) + tail_s) * SCALE, abs=1e-6
    )
    parts = (
        slow.queue_s + slow.prefill_s + slow.decode_s + slow.tool_s + slow.migration_s
        + slow.admission_s + slow.held_s + slow.weights_s
        + slow.control_s + slow.messaging_s + slow.tool_queue_s + slow.engine_lag_s
        + slow.worker_lag_s
    )  # fmt: skip
    assert parts == approx(slow.total_s, abs=1e-6)
    assert slow.other_s == approx(0.0, abs=1e-6)
    assert slow.total_s == approx(slow.end_s, abs=1e-6)  # submitted with the rollout


def on_time(engine_late_s: float = 0.0, control_s: float = 0.0) -> StepGaps:
    return StepGaps(
        publish_s=0.0, control_s=control_s, delivery_s=0.0, handling_s=0.0, engine_s=1.0,
        engine_late_s=engine_late_s, to_tool_s=0.0, tool_queue_s=0.0, tool_s=1.0,
    )  # fmt: skip


def test_a_run_on_its_scaled_clock_reports_no_lag_and_no_warning() -> None:
    lag = summary_of([on_time()] * 4).lag
    assert lag.worker_lag_fraction == pytest.approx(0.0, abs=1e-9)
    assert lag.slowest_behind_fraction == pytest.approx(0.0, abs=1e-9)
    assert lag.warning == ""


def test_engine_results_behind_the_scaled_clock_report_lag_and_warn() -> None:
    # Each step's engine time (1 wall s) comes back 0.2 wall s late: 0.2 of every 2.2 s.
    lag = summary_of([on_time(engine_late_s=0.2)] * 4).lag
    assert lag.worker_lag_fraction == pytest.approx(0.2 / 2.2)
    assert lag.worker_lag_fraction > LAG_WARNING_FRACTION
    assert "workers' lag 9%" in lag.warning and "100x" in lag.warning


def test_a_slow_control_plane_is_named_in_the_warning() -> None:
    lag = summary_of([on_time(control_s=0.3)] * 3).lag
    assert lag.control_lag_fraction == pytest.approx(0.3 / 2.3)
    assert lag.worker_lag_fraction == pytest.approx(0.0, abs=1e-9)
    assert "control plane 13%" in lag.warning and "workers' lag" not in lag.warning


def test_lag_under_the_threshold_does_not_warn() -> None:
    lag = summary_of([on_time(engine_late_s=0.05)] * 2).lag
    assert 0 < lag.worker_lag_fraction < LAG_WARNING_FRACTION
    assert lag.warning == ""


def durations(value: object, path: str = "") -> list[tuple[str, float]]:
    """Every ``*_s`` figure of a summary's JSON, with its path."""
    found: list[tuple[str, float]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key.endswith("_s") and isinstance(item, (int, float)):
                found.append((where, float(item)))
            found += durations(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += durations(item, f"{path}[{index}]")
    return found


skewed = st.floats(min_value=-0.5, max_value=0.5)  # clocks of different hosts disagree


@settings(max_examples=80)
@given(
    st.lists(st.builds(StepGaps, *[skewed] * 4, gap, skewed, skewed, skewed, gap), min_size=1,
             max_size=5),
    skewed,
    st.sampled_from([SCALE, 1.0, 20.0]),
)  # fmt: skip
def test_no_duration_of_a_summary_is_negative(
    steps: list[StepGaps], tail_s: float, recorded_scale: float
) -> None:
    """Whatever the clocks say (hosts that disagree by up to half a second) and whatever time
    scale the rollout recorded (a deployment at 100x recorded as 1x made tool queueing -570 s),
    a summary's durations are never negative: what the stamps cannot explain is ``other_s``."""
    recorder = Recorder("t0")
    recorder.trajectory(steps, tail_s)
    assert recorder.events is not None and recorder.stored is not None
    opened = msgspec.structs.replace(rollout_submitted(), time_scale=recorded_scale)
    summary = summarize_rollout("r", [opened, *recorder.events], [0.0, *recorder.stored])
    negative = [(where, v) for where, v in durations(msgspec.to_builtins(summary)) if v < 0]
    assert negative == []


def test_a_step_a_reshard_interrupted_counts_its_gap_as_the_reshards() -> None:
    """Its parts' engine time is modelled; the rest of the step (the stop, the hand-over, the
    relaunch, whatever the gate waited for) is the re-shard's, not engine lag or weights."""
    timeline = TrajectoryTimeline()
    traj = dict(rollout_id="r", traj_id="t")
    timeline.add(TrajectorySubmitted(event_id="s", occurred_at=0.0, spec=SPEC, **traj))
    timeline.add(
        GenerationStarted(event_id="g", occurred_at=1.0, step=0, worker_id="w1",
                          num_context_tokens=10, **traj)
    )  # fmt: skip
    timeline.add(
        GenerationInterrupted(event_id="i", occurred_at=2.0, step=0, worker_id="w1",
                              output_token_ids=[1, 2], prefill_s=1.0, decode_s=9.0, **traj)
    )  # fmt: skip
    timeline.add(
        Generated(event_id="d", occurred_at=5.0, step=0, worker_id="w0", output_token_ids=[1],
                  decode_s=20.0, weights_wait_s=7.0, **traj)
    )  # fmt: skip
    split = split_time(timeline, completed_at=5.0, time_scale=10.0)
    assert split.modelled_s == pytest.approx(30.0)
    assert split.reshard_s == pytest.approx(40.0 - 30.0)
    assert split.engine_lag_s == 0.0 and split.weights_s == 0.0
    assert split.holds_s == pytest.approx(split.admission_s + split.reshard_s)
