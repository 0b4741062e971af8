"""Timeline segments from recorded events: a simulated rollout (whose true breakdown the
simulator knows) and live-style events (wall clock, time scale, duplicates)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from heddle.control.bundle import ControlOptions, build_bundle
from heddle.control.systems import system_spec
from heddle.events import (
    Event,
    Generated,
    Migrated,
    RolloutFinished,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectoryPlaced,
)
from heddle.sim import SimConfig, Simulator, make_simulation_predictor
from heddle.sim.accounting import Column
from heddle.sim.simulator import Run
from heddle.timeline import SegmentKind, Timeline, build_timeline
from heddle.workloads import generate


def simulated(system: str = "heddle", num: int = 48) -> tuple[Run, Timeline]:
    trace = generate("coding", num, seed=3)
    config = SimConfig(model="qwen3-8b", num_gpus=4, record_events=True, predictor="oracle")
    options = ControlOptions(
        cost_for_tp=config.cost_for_tp, predictor=make_simulation_predictor(trace, config)
    )
    control = build_bundle(system_spec(system), options)
    run = Simulator(trace, control, [1, 1, 2], config).run()
    return run, build_timeline(run.events)


def union_length(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


@pytest.mark.parametrize("system", ["heddle", "verl"])
def test_simulated_rollout_segments_match_the_simulators_breakdown(system: str) -> None:
    run, timeline = simulated(system)
    assert timeline.rollout_id == "sim" and timeline.policy == system
    assert timeline.makespan_s == pytest.approx(run.makespan_s)
    by_traj: dict[str, list] = defaultdict(list)  # type: ignore[type-arg]
    for segment in timeline.segments:
        assert 0 <= segment.start_s < segment.end_s <= run.makespan_s + 1e-6
        by_traj[segment.traj_id].append(segment)
    for t in run.trajectories:
        segments = by_traj[t.traj_id]

        def total(kind: SegmentKind, segs: list = segments) -> float:  # type: ignore[type-arg]
            return sum(s.duration_s for s in segs if s.kind is kind)

        # The segments are the simulator's columns (the recording has no GenerationStarted, so
        # a hold between steps is drawn as control).
        for kind in ("admission", "weights", "queue", "prefill", "decode", "tool", "tool_queue"):
            expected = t.account.of(Column[kind.upper()])
            assert total(SegmentKind(kind)) == pytest.approx(expected, abs=1e-6), kind
        waits = total(SegmentKind.CONTROL) + total(SegmentKind.HELD)
        expected = t.account.of(Column.CONTROL) + t.account.of(Column.HELD)
        assert waits == pytest.approx(expected, abs=1e-6)
        # Every instant from submission to the end is in a segment; what only a migration
        # covers is the transfer time the tool gap did not hide.
        spans = [(s.start_s, s.end_s) for s in segments]
        assert union_length(spans) == pytest.approx(t.finished_at)
        stay = [(s.start_s, s.end_s) for s in segments if s.kind is not SegmentKind.MIGRATION]
        assert union_length(spans) - union_length(stay) == pytest.approx(t.migration_s, abs=1e-6)
        assert max(end for _, end in spans) == pytest.approx(t.finished_at)
        generation_workers = [s.worker_id for s in segments if s.kind is SegmentKind.DECODE]
        assert set(generation_workers) <= set(t.worker_history)


def test_heddle_run_draws_migrations_on_the_target_worker() -> None:
    run, timeline = simulated("heddle", num=96)
    migrations = [s for s in timeline.segments if s.kind is SegmentKind.MIGRATION]
    assert sum(t.num_migrations for t in run.trajectories) > 0
    assert migrations
    moved = {t.traj_id: t.worker_history for t in run.trajectories if t.num_migrations}
    for segment in migrations:
        assert segment.worker_id in moved[segment.traj_id][1:]


def live_events(time_scale: float) -> list[Event]:
    """One trajectory on a wall clock starting at 1000 s: placed, two steps, a tool call."""
    common = {"rollout_id": "r9", "traj_id": "t000000"}
    return [
        RolloutSubmitted(event_id="s", rollout_id="r9", occurred_at=1000.0, policy="heddle",
                         num_trajectories=1, time_scale=time_scale),
        TrajectoryPlaced(event_id="p", occurred_at=1000.5, worker_id="w01", **common),
        Generated(event_id="g0", occurred_at=1002.0, step=0, worker_id="w01",
                  output_token_ids=[1], prefill_s=1.0, decode_s=4.0, **common),
        ToolCalled(event_id="c0", occurred_at=1002.0, step=0, worker_id="w01", call_id="x",
                   tool="python", **common),
        ToolReturned(event_id="r0", occurred_at=1003.0, step=0, call_id="x", tool="python",
                     status="ok", duration_s=10.0, **common),
        ToolReturned(event_id="r0-dup", occurred_at=1003.5, step=0, call_id="x", tool="python",
                     status="ok", duration_s=10.0, **common),
        Generated(event_id="g1", occurred_at=1004.0, step=1, worker_id="w01",
                  output_token_ids=[1], decode_s=5.0, **common),
        Generated(event_id="g1-dup", occurred_at=1009.0, step=1, worker_id="w01",
                  output_token_ids=[1], decode_s=5.0, **common),
        RolloutFinished(event_id="f", rollout_id="r9", occurred_at=1004.2, num_completed=1,
                        makespan_s=42.0),
    ]  # fmt: skip


def test_live_events_are_scaled_to_model_time_and_duplicates_count_once() -> None:
    timeline = build_timeline(live_events(time_scale=10.0))
    got = [(s.kind, s.start_s, s.end_s) for s in timeline.segments]
    assert sorted(got, key=lambda row: row[1]) == [
        (SegmentKind.ADMISSION, pytest.approx(0.0), pytest.approx(5.0)),  # until placed
        (SegmentKind.CONTROL, pytest.approx(5.0), pytest.approx(15.0)),
        (SegmentKind.PREFILL, pytest.approx(15.0), pytest.approx(16.0)),
        (SegmentKind.DECODE, pytest.approx(16.0), pytest.approx(20.0)),
        (SegmentKind.TOOL, pytest.approx(20.0), pytest.approx(30.0)),
        (SegmentKind.CONTROL, pytest.approx(30.0), pytest.approx(35.0)),
        (SegmentKind.DECODE, pytest.approx(35.0), pytest.approx(40.0)),
    ]
    assert {s.worker_id for s in timeline.segments} == {"w01"}
    assert timeline.makespan_s == 42.0 and timeline.time_scale == 10.0


def test_a_step_ready_before_its_move_waits_for_the_control_plane_on_its_source() -> None:
    """The tool returns at 3 s; the move starts at 5 s and lands at 6 s (on w02): 3-5 s is a
    wait for the control plane on w01, drawn (it was a hole), and the move's transfer after it;
    a move begun inside a tool call hides in it and adds no wait."""
    common = {"rollout_id": "r9", "traj_id": "t000000"}
    events: list[Event] = [
        RolloutSubmitted(event_id="s", rollout_id="r9", occurred_at=0.0, policy="heddle",
                         num_trajectories=1),
        TrajectoryPlaced(event_id="p", occurred_at=0.0, worker_id="w01", **common),
        Generated(event_id="g0", occurred_at=2.0, step=0, worker_id="w01",
                  output_token_ids=[1], decode_s=2.0, **common),
        ToolCalled(event_id="c0", occurred_at=2.0, step=0, worker_id="w01", call_id="x",
                   tool="python", **common),
        ToolReturned(event_id="r0", occurred_at=3.0, step=0, call_id="x", tool="python",
                     status="ok", duration_s=1.0, **common),
        Migrated(event_id="m0", occurred_at=6.0, source_worker_id="w01", target_worker_id="w02",
                 transfer_s=1.0, **common),
        Generated(event_id="g1", occurred_at=8.0, step=1, worker_id="w02",
                  output_token_ids=[1], decode_s=2.0, **common),
        ToolCalled(event_id="c1", occurred_at=8.0, step=1, worker_id="w02", call_id="y",
                   tool="python", **common),
        Migrated(event_id="m1", occurred_at=9.0, source_worker_id="w02", target_worker_id="w01",
                 transfer_s=0.5, **common),
        ToolReturned(event_id="r1", occurred_at=10.0, step=1, call_id="y", tool="python",
                     status="ok", duration_s=2.0, **common),
        Generated(event_id="g2", occurred_at=11.0, step=2, worker_id="w01",
                  output_token_ids=[1], decode_s=1.0, **common),
    ]  # fmt: skip
    got = [(s.kind, s.worker_id, s.start_s, s.end_s) for s in build_timeline(events).segments]
    assert sorted(got, key=lambda row: (row[2], row[3])) == [
        (SegmentKind.DECODE, "w01", 0.0, 2.0),
        (SegmentKind.TOOL, "w01", 2.0, 3.0),
        (SegmentKind.CONTROL, "w01", 3.0, 5.0),  # ready, waiting for the control plane
        (SegmentKind.MIGRATION, "w02", 5.0, 6.0),
        (SegmentKind.DECODE, "w02", 6.0, 8.0),
        (SegmentKind.TOOL, "w02", 8.0, 10.0),
        (SegmentKind.MIGRATION, "w01", 8.5, 9.0),  # inside the tool call
        (SegmentKind.DECODE, "w01", 10.0, 11.0),
    ]
