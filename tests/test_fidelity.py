"""`heddle bench fidelity`: the gap analysis and the synthetic fleet as units, then both parts
of the benchmark end to end (tiny sizes: a real control plane, real NATS, sim-engine workers)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heddle.bus import Bus
from heddle.cli.apps import app
from heddle.config import Settings
from heddle.events import (
    ContinueTrajectory,
    Drain,
    Event,
    Generated,
    GenerationStarted,
    Migrated,
    MigrateOut,
    RolloutSubmitted,
    StartTrajectory,
    ToolCalled,
    ToolReturned,
    TrajectorySpec,
)
from heddle.fidelity.fleet import FleetConfig, SyntheticFleet
from heddle.fidelity.gaps import step_gaps
from heddle.traces import TraceStep, TraceTrajectory

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


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def spec(index: int) -> TrajectorySpec:
    return TrajectorySpec(group_id="g", index=index, environment="trace")


async def test_fleet_plays_steps_measures_routing_and_honours_migrations() -> None:
    published: list[Event] = []

    async def publish(events: Sequence[Event]) -> None:
        published.extend(events)

    steps = [TraceStep(output_tokens=3, tool_s=1.0, tool_output_tokens=2)] * 3
    trace = [TraceTrajectory(id="a", prompt_tokens=4, steps=steps)]
    clock = Clock()
    fleet = SyntheticFleet(R, trace, publish, FleetConfig(num_workers=2, tool_wall_s=0.0),
                           clock=clock)  # fmt: skip
    assert [r.worker_id for r in fleet.registrations(0.0)] == ["w00", "w01"]
    fleet.on_command(StartTrajectory(command_id="s", rollout_id=R, issued_at=0.0,
                                     worker_id="w01", traj_id=T, spec=spec(0)))  # fmt: skip
    assert fleet.stats.num_started == 1 and fleet.stats.all_started_at == 100.0
    assert fleet.ready.popleft() == T
    fleet.is_measuring = True
    fleet.on_command(MigrateOut(command_id="m", rollout_id=R, issued_at=0.0, worker_id="w01",
                                traj_id=T, target_worker_id="w00", migration_id="m1"))  # fmt: skip

    await fleet._play_step(fleet.trajectories[T])  # the driver's step, without its pacing
    kinds = [type(e).__name__ for e in published]
    assert kinds == ["GenerationStarted", "Generated", "ToolCalled", "Migrated", "ToolReturned"]
    moved = published[3]
    assert isinstance(moved, Migrated) and moved.target_worker_id == "w00"
    generated = published[1]
    assert isinstance(generated, Generated) and len(generated.output_token_ids) == 3
    assert generated.worker_id == "w01"

    clock.now = 100.004
    returned = published[-1]
    assert isinstance(returned, ToolReturned)
    fleet.on_command(ContinueTrajectory(command_id="c", rollout_id=R, issued_at=0.0,
                                        worker_id="w00", traj_id=T, step=1,
                                        tool_result=returned))  # fmt: skip
    assert fleet.stats.latencies_s == [pytest.approx(0.004)]
    assert fleet.ready.popleft() == T  # step 1 of 3: it plays on
    await fleet._play_step(fleet.trajectories[T])
    fleet.on_command(ContinueTrajectory(command_id="c2", rollout_id=R, issued_at=0.0,
                                        worker_id="w00", traj_id=T, step=2,
                                        tool_result=returned))  # fmt: skip
    assert not fleet.ready  # step 2 is its last: never played, so it stays live
    assert fleet.stats.commands["ContinueTrajectory"] == 2


@pytest.mark.timeout(240)
def test_bench_fidelity_end_to_end(tmp_path: Path) -> None:
    args = ["--data-dir", str(tmp_path), "bench", "fidelity", "--json",
            "--trajectories", "8", "--workers", "2", "--time-scale", "400",
            "--overhead-trajectories", "48", "--overhead-workers", "4", "--samples", "40",
            "--steps-per-s", "100", "--timeout-s", "200"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    makespan = document["makespan"]
    assert makespan["live"]["num_completed"] == 8
    assert makespan["live"]["makespan_s"] > 0 and makespan["simulated"]["makespan_s"] > 0
    ratio = makespan["live"]["makespan_s"] / makespan["simulated"]["makespan_s"]
    assert makespan["live_over_simulated"] == pytest.approx(ratio)
    assert makespan["live_overheads"]["num_steps"] > 8
    overhead = document["overhead"]
    assert overhead["num_samples"] == 40
    assert overhead["commands"]["StartTrajectory"] == 48
    assert 0 < overhead["latency_ms"]["p50"] <= overhead["latency_ms"]["p99"]
    assert set(overhead["control_batch_ms"]) >= {"control-placement", "control-prediction"}
    assert not list((tmp_path / "bench").iterdir())  # temporary data dirs are removed


def test_bad_flags_are_user_errors(tmp_path: Path) -> None:
    for args, message in ((["--part", "all"], "--part"), (["--policy", "x"], "unknown --policy"),
                          (["--workers", "0"], "workers >= 1")):  # fmt: skip
        result = CliRunner().invoke(app, ["--data-dir", str(tmp_path), "bench", "fidelity", *args])
        assert result.exit_code != 0 and message in str(result.exception), args


async def test_command_watch_sees_commands_as_published(nats_url: str, tmp_path: Path) -> None:
    seen: list[object] = []
    async with Bus(Settings(nats_url=nats_url, data_dir=tmp_path)) as bus:
        watch = await bus.watch_commands(seen.append)
        command = Drain(command_id="d1", issued_at=1.0, worker_id="w03")
        await bus.publish(command)
        await bus.publish_raw("heddle.cmd.worker.w03.drain", b"not json", "junk")
        for _ in range(100):
            if seen and watch.num_dropped:
                break
            await asyncio.sleep(0.02)
        await watch.close()
    assert seen == [command] and watch.num_dropped == 1
