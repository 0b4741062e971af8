"""Weight versions through a whole Heddle in one process: a trainer publishes weights mid-rollout
(a path, then a small model's bytes through the object store), every worker loads them between
generations and says so, every ``Generated`` stored after a worker's ``weights.loaded`` carries
the new version, and each ``Completed`` lists the versions of its generations."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from heddle.bus import ReplayQuery
from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import (
    Completed,
    Event,
    Failed,
    Generated,
    RolloutFinished,
    TrajectorySubmitted,
    WeightsLoaded,
)
from heddle.events.subjects import trajectory_subjects
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.rollout.submit import submit
from heddle.traces import TraceStep, TraceTrajectory

TIME_SCALE = 50.0


def trace(num: int) -> list[TraceTrajectory]:
    steps = [TraceStep(output_tokens=60, tool_s=3.0, tool_output_tokens=5) for _ in range(6)]
    return [TraceTrajectory(id=f"w{i}", prompt_tokens=16, steps=steps) for i in range(num)]


@pytest.fixture
def settings(nats_url: str, tmp_path: Path) -> Settings:
    return Settings(nats_url=nats_url, data_dir=tmp_path / "data")


async def wait_for_generations(client: HeddleClient, rollout_id: str, count: int) -> None:
    query = ReplayQuery(
        filter_subjects=trajectory_subjects(rollout_id, "*", "generated"), start_sequence=1
    )
    for _ in range(2000):
        if len([r async for r in client.bus.replay_events(query)]) >= count:
            return
        await asyncio.sleep(0.02)
    raise TimeoutError(f"fewer than {count} generations")


async def test_weights_published_mid_rollout_reach_every_later_generation(
    settings: Settings, tmp_path: Path
) -> None:
    weights = tmp_path / "v1.pt"
    weights.write_bytes(b"state dict of version 1")
    control = ControlPlaneConfig(cost_model="qwen3-8b", predictor=PredictorConfig("oracle"))
    options = InProcessOptions(
        num_workers=2,
        engine_options={"time_scale": str(TIME_SCALE), "weight_load_s": "1.0"},
        control_plane=control,
    )
    async with InProcessDeployment(settings, options), HeddleClient(settings) as client:
        rollout_id = await client.submit(trace=trace(4))
        await wait_for_generations(client, rollout_id, 4)
        await client.publish_weights(1, weights)
        first = await client.wait_weights_loaded(1, num_workers=2, timeout_s=30)
        await wait_for_generations(client, rollout_id, 12)
        await client.publish_weights(2, b"the bytes of version 2")
        await client.publish_weights(1, weights)  # not above the latest: ignored
        second = await client.wait_weights_loaded(2, num_workers=2, timeout_s=30)
        completions = [t async for t in client.completions(rollout_id)]
        stream = [r.message async for r in client.bus.replay_events(ReplayQuery(
                filter_subjects=("heddle.evt.>",), start_sequence=1))]  # fmt: skip
        await client.publish_weights(3, tmp_path / "missing.pt")
        with pytest.raises(RuntimeError, match="cannot load weights 3: EngineError"):
            await client.wait_weights_loaded(3, num_workers=2, timeout_s=30)
    assert sorted(first) == sorted(second) == ["w00", "w01"]
    served = {"w00": 0, "w01": 0}
    num_checked = {0: 0, 1: 0, 2: 0}
    for event in stream:  # stream order: a load's report precedes what followed it
        if isinstance(event, WeightsLoaded):
            served[event.worker_id] = max(served[event.worker_id], event.weight_version)
        elif isinstance(event, Generated):
            assert event.weight_version >= served[event.worker_id], event.event_id
            num_checked[event.weight_version] += 1
    assert all(num_checked[version] > 0 for version in (0, 1, 2)), num_checked
    by_traj = {}
    for event in stream:
        if isinstance(event, Generated):
            by_traj.setdefault(event.traj_id, []).append(event.weight_version)
    assert len(completions) == 4
    for trajectory in completions:
        assert isinstance(trajectory, Completed)
        versions = by_traj[trajectory.traj_id]
        assert versions == sorted(versions)  # never back to older weights
        assert trajectory.weight_versions == list(dict.fromkeys(versions))
    assert any(len(t.weight_versions) > 1 for t in completions)  # spanned a swap


async def swap_under_a_staleness_bound(
    settings: Settings, tmp_path: Path, max_attempts: int
) -> tuple[list[Completed], list[Event]]:
    """Four trajectories bounded by ``max_staleness=0``, weights v1 published mid-rollout: what
    ``completions()`` handed over, and the rollout's events."""
    weights = tmp_path / "v1.pt"
    weights.write_bytes(b"state dict of version 1")
    control = ControlPlaneConfig(cost_model="qwen3-8b", predictor=PredictorConfig("oracle"))
    options = InProcessOptions(num_workers=2, engine_options={"time_scale": str(TIME_SCALE)},
                               control_plane=control)  # fmt: skip
    specs = [
        msgspec.structs.replace(s, max_staleness=0, max_attempts=max_attempts)
        for s in trace_specs(trace(4))
    ]
    async with InProcessDeployment(settings, options), HeddleClient(settings) as client:
        plan = RolloutPlan("heddle", specs, "trace", TIME_SCALE)
        rollout_id = (await submit(client.bus, plan, trainer=client.trainer)).rollout_id
        await wait_for_generations(client, rollout_id, 4)
        await client.publish_weights(1, weights)
        await client.wait_weights_loaded(1, num_workers=2, timeout_s=30)
        ended = [t async for t in client.completions(rollout_id)]
        stream = [r.message async for r in client.bus.replay_events(ReplayQuery(
                filter_subjects=(f"heddle.evt.*.{rollout_id}.>",), start_sequence=1))]  # fmt: skip
    return ended, stream


async def test_a_staleness_bound_ends_trajectories_that_would_span_too_many_versions(
    settings: Settings, tmp_path: Path
) -> None:
    ended, _ = await swap_under_a_staleness_bound(settings, tmp_path, max_attempts=1)
    assert len(ended) == 4
    stale = [t for t in ended if t.finish_reason == "stale"]
    assert stale, "a trajectory spanned the swap"
    for trajectory in ended:
        assert len(trajectory.weight_versions) <= 1  # never two versions in one trajectory
    for trajectory in stale:
        assert "exceed max_staleness 0" in trajectory.reason and trajectory.reward == 0.0
        assert trajectory.weight_versions == [0] and trajectory.num_steps < 6


async def test_a_stale_trajectory_is_run_afresh_on_the_new_weights_in_its_own_slot(
    settings: Settings, tmp_path: Path
) -> None:
    ended, stream = await swap_under_a_staleness_bound(settings, tmp_path, max_attempts=3)
    resubmitted = {e.traj_id: e.resubmitted_as for e in stream if isinstance(e, Failed)}
    assert resubmitted, "a trajectory spanned the swap"
    assert all(new == f"{old}-r1" for old, new in resubmitted.items())
    assert sorted(t.index for t in ended) == [0, 1, 2, 3]  # one per slot, no stale one
    by_id = {t.traj_id: t for t in ended}
    for old, new in resubmitted.items():
        assert old not in by_id and by_id[new].finish_reason == "stop"
        assert by_id[new].weight_versions == [1] and by_id[new].num_steps == 6
    assert all(len(t.weight_versions) == 1 for t in ended)
    (finished,) = [e for e in stream if isinstance(e, RolloutFinished)]
    assert (finished.num_completed, finished.num_failed) == (4, 0)
    again = [e for e in stream if isinstance(e, TrajectorySubmitted) and e.spec.attempt == 1]
    assert sorted(e.traj_id for e in again) == sorted(resubmitted.values())
