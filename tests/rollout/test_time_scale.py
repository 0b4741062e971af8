"""``--time-scale auto``: the rule of ``heddle.rollout.time_scale`` (the time off the model stays
within its budget at the scale it picks, by the rule's own model of transit and queueing), the
rounding, and what `rollout run` does with the flag."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.cli.rollout_flags import attached_time_scale, run_time_scale
from heddle.errors import UserError
from heddle.rollout.sources import Source
from heddle.rollout.submission import trace_specs
from heddle.rollout.time_scale import (
    CPU_S_PER_STEP,
    HOP_S,
    MAX_TIME_SCALE,
    OFF_MODEL_BUDGET,
    auto_time_scale,
    round_down,
    step_pace,
)
from heddle.workloads import generate


def off_model_share(scale: float, steps_per_s: float, step_s: float, free_cores: float) -> float:
    """The rule's model: a step's transit (``HOP_S`` when the CPU is not the bottleneck, longer
    as the cores fill) over the step, in model seconds."""
    utilization = scale * steps_per_s * CPU_S_PER_STEP / free_cores
    if utilization >= 1:
        return 1.0
    transit_s = scale * HOP_S / (1 - utilization)
    return transit_s / (transit_s + step_s)


@given(
    num=st.integers(1, 2000),
    cores=st.integers(1, 64),
    load=st.floats(0, 100),
    workload=st.sampled_from(["coding", "search", "math"]),
)
def test_the_scale_picked_keeps_the_budget_and_the_next_one_up_would_not(
    num: int, cores: int, load: float, workload: str
) -> None:
    trace = (generate(workload, 8, seed=1) * (num // 8 + 1))[:num]
    auto = auto_time_scale(trace, "qwen3-8b", "h200", num_cores=cores, load=load)
    figures = (auto.steps_per_s, auto.step_s, auto.free_cores)
    assert auto.time_scale == 1.0 or off_model_share(auto.time_scale, *figures) <= OFF_MODEL_BUDGET
    above = [s for s in (1, 2, 5, 10, 20, 50, 100) if s > auto.time_scale]
    if above and auto.time_scale > 1.0:  # the next rounded scale would break it
        assert off_model_share(above[0], *figures) > OFF_MODEL_BUDGET * 0.9


def test_a_busy_machine_shares_its_cores_with_the_run() -> None:
    trace = generate("coding", 8, seed=0)
    assert auto_time_scale(trace, "qwen3-8b", "h200", num_cores=2, load=0.0).free_cores == 2
    busy = auto_time_scale(trace, "qwen3-8b", "h200", num_cores=2, load=10.0)
    assert busy.free_cores == pytest.approx(2 * 6 / 16)


def test_more_trajectories_or_fewer_free_cores_mean_a_slower_clock() -> None:
    small, large = generate("coding", 16, seed=0), generate("coding", 512, seed=0)
    idle = auto_time_scale(small, "qwen3-8b", "h200", num_cores=2, load=0.0)
    busy = auto_time_scale(small, "qwen3-8b", "h200", num_cores=2, load=8.0)
    crowded = auto_time_scale(large, "qwen3-8b", "h200", num_cores=2, load=0.0)
    assert busy.time_scale <= idle.time_scale and crowded.time_scale <= idle.time_scale
    assert "16 trajectories" in idle.describe() and f"{idle.time_scale:g}x" in idle.describe()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.3, 1.0), (1.0, 1.0), (1.9, 1.0), (2.0, 2.0), (4.99, 2.0), (7.0, 5.0), (19.0, 10.0),
     (63.0, 50.0), (5000.0, MAX_TIME_SCALE)],
)  # fmt: skip
def test_rounding_down_to_one_two_five(value: float, expected: float) -> None:
    assert round_down(value) == expected


def test_a_step_is_its_tool_time_and_its_output_at_one_sequences_pace() -> None:
    trace = generate("coding", 8, seed=3)
    steps = [s for t in trace for s in t.steps]
    tool_only = sum(s.tool_s for s in steps) / len(steps)
    step_s, steps_per_s = step_pace(trace, "qwen3-8b", "h200")
    assert step_s > tool_only
    assert step_pace(trace, "qwen3-32b", "h200")[0] > step_s
    longest_s = max(sum(s.tool_s for s in t.steps) for t in trace)
    assert steps_per_s < len(steps) / longest_s  # the longest lasts beyond its tools


def test_rollout_run_picks_auto_by_default_and_says_so() -> None:
    trace = generate("coding", 4, seed=0)
    source = Source(trace_specs(trace), "workload:coding", trace, [])
    options, note = run_time_scale(None, "sim", {}, source)
    assert float(options["time_scale"]) >= 1.0 and note.startswith("time scale auto:")
    assert run_time_scale("25", "sim", {}, source) == ({"time_scale": "25.0"}, "")
    tasks = Source(trace_specs(trace), "tasks:x", [], [])
    assert run_time_scale("auto", "sim", {}, tasks)[0]["time_scale"] == "1.0"
    with pytest.raises(UserError, match="number or auto"):
        run_time_scale("fast", "sim", {}, source)
    with pytest.raises(UserError, match="sim engines"):
        run_time_scale("auto", "torch", {}, source)
    assert run_time_scale(None, "torch", {}, source) == ({}, "")


def test_an_attached_run_takes_the_deployments_time_scale_or_checks_the_one_given() -> None:
    assert attached_time_scale(None, {"model": "qwen3-8b"}) == ({"model": "qwen3-8b"}, None)
    assert attached_time_scale("auto", {}) == ({}, None)
    # a number is the plan's (checked by the control plane) and the started workers' too
    assert attached_time_scale("50", {}) == ({"time_scale": "50.0"}, 50.0)
    with pytest.raises(UserError, match="number or auto"):
        attached_time_scale("x", {})
