"""Every second of a simulated trajectory is in one column of its breakdown: on random small
rollouts (groups, tools with cold starts, KV pressure, weight swaps mid-rollout, control-plane
latency, every system and engine model, the baselines' concurrency caps drawn tight), each
trajectory's columns sum to its total."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_strategies import grouped_rollouts

from heddle.control.bundle import CapSetting
from heddle.control.systems import SYSTEMS, system_spec
from heddle.events import Event, Migrated, TrajectoryPlaced
from heddle.experiments.kv_pressure import scaled_config
from heddle.policy.engine_models import ENGINE_MODELS
from heddle.sim import SimConfig, Simulator, simulate
from heddle.sim.accounting import COLUMN_KEYS, Column
from heddle.sim.results import Breakdown
from heddle.sim.run import control_for
from heddle.sim.weight_loads import WeightPlan
from heddle.timeline import SegmentKind, build_timeline
from heddle.traces import TraceStep, TraceTrajectory
from heddle.workloads import generate

MODEL = "qwen3-8b"

rollouts = partial(
    grouped_rollouts,
    max_samples=8,
    max_prompt_tokens=2000,
    max_output_tokens=200,
    tool_s=(0.0, 0.05, 1.0, 8.0),
    max_tool_output_tokens=300,
    max_steps=4,
)
"""1-3 groups of 1-8 samples sharing a prompt."""


@st.composite
def configs(draw: st.DrawFn, trace: list[TraceTrajectory]) -> SimConfig:
    p50 = draw(st.sampled_from([0.0, 3.0, 50.0]))
    config = SimConfig(
        model=MODEL,
        num_gpus=draw(st.sampled_from([1, 2, 4])),
        engine_model=draw(st.sampled_from(sorted(ENGINE_MODELS))),
        predictor="oracle",
        num_warm_executors=draw(st.sampled_from([None, 0, 2])),
        tool_cold_start_s=draw(st.sampled_from([0.0, 0.7])),
        control_latency_p50_ms=p50,
        control_latency_p99_ms=p50 * draw(st.sampled_from([1.0, 20.0])),
        weight_load_s=draw(st.sampled_from([0.5, 5.0])),
        seed=draw(st.integers(0, 3)),
        record_events=True,
    )
    headroom = draw(st.sampled_from([1.1, 3.0, None]))
    if headroom is None:
        return config
    longest = max(t.num_context_tokens for t in trace)
    return scaled_config(config, min(1.0, headroom * longest / config.cost_for_tp(1).max_kv_tokens))


CAPS: tuple[CapSetting, ...] = ("default", 1, 3)
"""A baseline's concurrency cap: its code's default, or a total of 1 or 3 units (a capped
trajectory waits in the admission column); for a bundle with KV admission, KV admission or a
static cap of 1 or 3 trajectories."""


def assert_accounted(breakdown: Breakdown, trajectory: TraceTrajectory) -> None:
    columns = breakdown.columns
    assert list(columns) == list(COLUMN_KEYS)
    assert min(columns.values()) >= -1e-9, columns
    assert math.fsum(columns.values()) == pytest.approx(breakdown.total_s, rel=1e-9, abs=1e-9)
    if breakdown.num_output_tokens == trajectory.num_output_tokens:  # completed
        tools_s = math.fsum(step.tool_s for step in trajectory.steps[:-1])
        assert breakdown.tool_s == pytest.approx(tools_s, rel=1e-9, abs=1e-9)


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), trace=rollouts(), system=st.sampled_from(sorted(SYSTEMS)))
def test_every_trajectory_s_columns_sum_to_its_total(
    data: st.DataObject, trace: list[TraceTrajectory], system: str
) -> None:
    config = data.draw(configs(trace))
    spec = system_spec(system)
    has_setting = spec.concurrency is not None or spec.admits
    cap = data.draw(st.sampled_from(CAPS)) if has_setting else None
    control, tp_degrees = control_for(trace, spec, config, concurrency_cap=cap)
    publications = data.draw(st.sampled_from([(), ((0.5, 1),), ((0.2, 1), (3.0, 2))]))
    run = Simulator(trace, control, tp_degrees, config, WeightPlan(publications=publications)).run()
    placed: dict[str, float] = {}
    for event in run.events:
        if isinstance(event, TrajectoryPlaced):
            placed.setdefault(event.traj_id, event.occurred_at)
    drawn = timeline_columns(run.events)
    for t in run.trajectories:
        assert t.account.column is None  # every trajectory ended
        assert_accounted(Breakdown.of(t), t.trace)
        if t.traj_id in placed:  # waited for placement until the control plane placed it
            assert t.account.of(Column.ADMISSION) == pytest.approx(placed[t.traj_id], abs=1e-9)
        if t.num_output_tokens == t.trace.num_output_tokens:  # the timeline draws the same
            for kind in DRAWN:
                expected = t.account.of(kind)
                if kind is Column.CONTROL:
                    expected += t.account.of(Column.HELD) + t.account.of(Column.RERUN)
                assert drawn[t.traj_id][kind] == pytest.approx(expected, abs=1e-6), kind


DRAWN = (
    Column.ADMISSION, Column.CONTROL, Column.WEIGHTS, Column.QUEUE, Column.PREFILL,
    Column.DECODE, Column.TOOL_QUEUE, Column.TOOL,
)  # fmt: skip
"""The columns a timeline of a simulation tells apart: with no ``GenerationStarted`` in the
recording, a hold between steps and an abandoned generation are drawn as control."""


def timeline_columns(events: list[Event]) -> dict[str, dict[Column, float]]:
    """Per trajectory, the timeline's seconds of each kind (``heddle.timeline``)."""
    drawn: dict[str, dict[Column, float]] = defaultdict(lambda: defaultdict(float))
    for segment in build_timeline(events).segments:
        if segment.kind is not SegmentKind.MIGRATION:
            kind = Column.CONTROL if segment.kind is SegmentKind.HELD else Column[segment.kind.name]
            drawn[segment.traj_id][kind] += segment.duration_s
    return drawn


def test_the_slowest_of_every_system_has_every_column() -> None:
    """What ``heddle sim compare --json`` prints: each system's slowest trajectory with every
    column, their names, and their sum equal to its total."""
    trace = [
        TraceTrajectory(
            id=f"s{i}",
            group=f"g{i % 3}",
            prompt_tokens=900,
            steps=[TraceStep(output_tokens=150, tool_s=2.0, tool_output_tokens=200)] * 3,
        )
        for i in range(12)
    ]
    config = scaled_config(SimConfig(model=MODEL, num_gpus=2, predictor="oracle"), 0.004)
    for system in SYSTEMS:
        slowest = simulate(trace, system, config).summary()["slowest"]
        assert isinstance(slowest, dict)
        assert slowest["columns"] == list(COLUMN_KEYS)
        total = math.fsum(slowest[key] for key in slowest["columns"])
        assert total == pytest.approx(slowest["total_s"], rel=1e-9), system


def test_held_by_admission_and_control_latency_are_columns() -> None:
    """Heddle's KV admission holds trajectories before placing them: that wait is the
    ``admission`` column (it was in no column before); each start waits for its command."""
    trace = [
        TraceTrajectory(
            id=f"s{i}",
            group=f"g{i}",
            prompt_tokens=1500,
            steps=[TraceStep(output_tokens=300, tool_s=1.0, tool_output_tokens=300)] * 2,
        )
        for i in range(8)
    ]
    base = scaled_config(SimConfig(model=MODEL, num_gpus=1, predictor="oracle"), 0.006)
    config = dataclasses.replace(base, control_latency_p50_ms=20.0, control_latency_p99_ms=20.0)
    control, tp = control_for(trace, system_spec("heddle"), config)
    run = Simulator(trace, control, tp, config).run()
    admitted_late = [t for t in run.trajectories if t.account.of(Column.ADMISSION) > 1.0]
    assert admitted_late
    for t in run.trajectories:
        # A start and one continue per later step, each 20 ms on its way.
        assert t.account.of(Column.CONTROL) == pytest.approx(0.02 * len(t.trace.steps), rel=1e-6)
        assert_accounted(Breakdown.of(t), t.trace)


def test_a_step_that_waits_for_its_move_is_in_the_migration_column() -> None:
    """Heddle with a noisy predictor migrates; on SGLang the target warms the context up with
    a prefill, and a step whose tool returned before that prefill ended waits in
    ``migration`` (the torch engine's KV transfers hide in the tool gaps on this trace)."""
    trace = generate("coding", 96, seed=5)
    config = SimConfig(
        model=MODEL,
        num_gpus=8,
        predictor="noisy_oracle",
        predictor_sigma=1.0,
        engine_model="sglang",
        record_events=True,
    )
    control, tp = control_for(trace, system_spec("heddle"), config)
    run = Simulator(trace, control, tp, config).run()
    assert any(isinstance(event, Migrated) for event in run.events)
    assert sum(t.account.of(Column.MIGRATION) for t in run.trajectories) > 1.0
    for t in run.trajectories:
        assert_accounted(Breakdown.of(t), t.trace)


def test_a_step_ready_before_its_move_waits_in_control_on_the_timeline_too() -> None:
    """Hypothesis's example: fix-1 at its default KV admission, 3 ms per command. g1-s0's tool
    returns at once; its move's command lands 3 ms later, while it waits for its continue. The
    simulator counts those 3 ms as control; the timeline drew nothing between the tool's return
    and the transfer (a hole in the trajectory's life), so its control column was 3 ms short."""

    def step(output_tokens: int, tool_output_tokens: int = 0) -> TraceStep:
        return TraceStep(
            output_tokens=output_tokens, tool_s=0.0, tool_output_tokens=tool_output_tokens
        )

    one = [step(1)]
    steps_by_id = {
        "g0-s0": one, "g0-s1": one, "g0-s2": one, "g0-s3": [step(4)], "g0-s4": [step(1, 16)],
        "g0-s5": [step(10)], "g1-s0": [step(1), step(1)], "g1-s1": [step(1), step(56)],
        "g2-s0": [step(1, 1), step(12), step(56, 2)],
    }  # fmt: skip
    trace = [
        TraceTrajectory(id=i, group=i[:2], prompt_tokens=52 if i == "g2-s0" else 1, steps=steps)
        for i, steps in steps_by_id.items()
    ]
    base = SimConfig(
        model=MODEL, num_gpus=4, engine_model="sglang", predictor="oracle", weight_load_s=0.5,
        control_latency_p50_ms=3.0, control_latency_p99_ms=3.0, record_events=True,
    )  # fmt: skip
    config = scaled_config(base, 0.00018201810573063455)
    control, tp_degrees = control_for(
        trace, system_spec("fix-1"), config, concurrency_cap="default"
    )
    run = Simulator(trace, control, tp_degrees, config).run()
    moved = next(t for t in run.trajectories if t.trace.id == "g1-s0")
    assert moved.num_migrations == 1 and moved.num_output_tokens == moved.trace.num_output_tokens
    assert moved.account.of(Column.CONTROL) == pytest.approx(0.006)  # its start and its move
    drawn = timeline_columns(run.events)[moved.traj_id]
    for kind in DRAWN:
        expected = moved.account.of(kind)
        if kind is Column.CONTROL:
            expected += moved.account.of(Column.HELD) + moved.account.of(Column.RERUN)
        assert drawn[kind] == pytest.approx(expected, abs=1e-6), kind
