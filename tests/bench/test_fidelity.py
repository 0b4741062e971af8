"""`heddle bench fidelity`: the gap analysis as a unit, then both parts of the benchmark end to
end (tiny sizes: a real control plane, real NATS, sim-engine workers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heddle.bench.fidelity.gaps import step_gaps
from heddle.cli.apps import app
from heddle.events import (
    Event,
    Generated,
    GenerationStarted,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
)

R, T = "r1", "t000000"


def test_gaps_separate_tool_dispatch_routing_and_engine_lateness() -> None:
    """Time scale 10: a 5 model-s tool is 0.5 wall s; one step's gaps are set by hand."""
    c = {"rollout_id": R, "traj_id": T, "worker_id": "w"}
    tool = {"rollout_id": R, "traj_id": T, "call_id": "x", "tool": "t"}
    events: list[Event] = [
        RolloutSubmitted(event_id="s", rollout_id=R, occurred_at=0.0, policy="heddle",
                         num_trajectories=1, time_scale=10.0),
        GenerationStarted(event_id="a", occurred_at=1.0, step=0, num_context_tokens=1, **c),
        # 0.2 wall s of engine time, done 0.25 s after the start: 50 ms late
        Generated(event_id="b", occurred_at=1.25, step=0, output_token_ids=[1], decode_s=2.0, **c),
        ToolCalled(event_id="c", occurred_at=1.25, step=0, worker_id="w", **tool),
        # 30 ms more than the tool's 0.5 wall s
        ToolReturned(event_id="d", occurred_at=1.78, step=0, status="ok", duration_s=5.0, **tool),
        GenerationStarted(event_id="e", occurred_at=1.79, step=1, num_context_tokens=2, **c),
    ]  # fmt: skip
    gaps = step_gaps(events)
    assert gaps.time_scale == 10.0 and gaps.num_steps == 2
    assert gaps.median_ms["engine_lateness"] == pytest.approx(50.0)
    assert gaps.median_ms["tool_dispatch"] == pytest.approx(30.0)
    assert gaps.median_ms["routing"] == pytest.approx(10.0)
    assert gaps.max_trajectory_total_model_s["routing"] == pytest.approx(0.1)


@pytest.mark.timeout(240)
def test_bench_fidelity_end_to_end(tmp_path: Path) -> None:
    args = ["--data-dir", str(tmp_path), "bench", "fidelity", "--json",
            "--trajectories", "8", "--workers", "2", "--time-scale", "400",
            "--overhead-trajectories", "48", "--overhead-workers", "4", "--steps-per-s", "24",
            "--duration-s", "6", "--warmup-s", "2", "--timeout-s", "200"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    makespan = document["makespan"]
    assert makespan["live"]["num_completed"] == 8
    assert makespan["live"]["makespan_s"] > 0 and makespan["simulated"]["makespan_s"] > 0
    # Live runs the simulator's engine model plus real overheads: it cannot beat the model by
    # much (a live run that skipped work would).
    assert makespan["live_over_simulated"] > 0.8
    assert makespan["live_overheads"]["num_steps"] > 8
    overhead = document["overhead"]
    assert overhead["num_samples"] > 50 and overhead["options"]["num_trajectories"] == 48
    assert 0 < overhead["latency_ms"]["p50"] <= overhead["latency_ms"]["p99"]
    assert isinstance(overhead["meets_target"], bool)
    assert set(overhead["control_batch_ms"]) == {"control-plane"}
    late = "prediction+reshard+priority+transfer+rollout"
    assert set(overhead["control_decide_ms"]) >= {"placement", late, "liveness"}
    assert not list((tmp_path / "bench").iterdir())  # temporary data dirs are removed


def test_bad_flags_are_user_errors(tmp_path: Path) -> None:
    for args, message in ((["--part", "all"], "--part"), (["--policy", "x"], "unknown --policy"),
                          (["--workers", "0"], "workers >= 1"),
                          (["--engine", "gpu"], "--engine"),
                          (["--engine", "torch", "--policies", "heddle,x"], "unknown policy"),
                          (["--engine", "torch", "--workers", "0"], "workers >= 1")):  # fmt: skip
        result = CliRunner().invoke(app, ["--data-dir", str(tmp_path), "bench", "fidelity", *args])
        assert result.exit_code != 0 and message in str(result.exception), args


def test_engine_trace_is_seeded_grouped_and_has_a_long_tail() -> None:
    from heddle.bench.fidelity.engine_trace import EngineTraceShape, engine_trace

    shape = EngineTraceShape()
    trace = engine_trace(32, seed=3)
    assert trace == engine_trace(32, seed=3) and trace != engine_trace(32, seed=4)
    groups: dict[str, set[int]] = {}
    for trajectory in trace:
        groups.setdefault(trajectory.group, set()).add(trajectory.prompt_tokens)
        assert trajectory.steps[-1].tool_s == 0.0  # the last step ends the trajectory
    assert len(groups) == 8 and all(len(lengths) == 1 for lengths in groups.values())
    steps = [len(trajectory.steps) for trajectory in trace]
    assert max(steps) >= shape.long_steps[0] and min(steps) <= shape.short_steps[1]


def test_the_simulated_reference_on_a_profile_recomputes_only_under_kv_pressure() -> None:
    from heddle.bench.fidelity.engine import simulate_on_profile
    from heddle.bench.fidelity.engine_options import EngineFidelityOptions
    from heddle.policy.cost.profiles import parse_profile

    def cost(max_kv_tokens: int) -> object:
        profile = {
            "model": "tiny", "hardware": "cpu-2core",
            "itl_ms": {"1": {"1": 3.0, "8": 5.0, "16": 6.0}},
            "prefill_tokens_per_s": {"1": 20000.0}, "max_kv_tokens": {"1": max_kv_tokens},
            "context_tokens": 160,
        }  # fmt: skip
        return parse_profile(json.dumps(profile), "json").cost_model(1)

    options = EngineFidelityOptions(num_trajectories=16)
    roomy = {p: simulate_on_profile(options, p, cost(1 << 20)) for p in options.policies}  # type: ignore[arg-type]
    tight = {p: simulate_on_profile(options, p, cost(1200)) for p in options.policies}  # type: ignore[arg-type]
    assert all(result.num_recomputed_tokens == 0 for result in roomy.values())
    assert any(result.num_recomputed_tokens > 0 for result in tight.values())
    for policy in options.policies:
        assert tight[policy].num_failed == roomy[policy].num_failed == 0
        assert tight[policy].makespan_s >= roomy[policy].makespan_s * 0.99
