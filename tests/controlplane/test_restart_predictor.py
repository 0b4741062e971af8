"""A restarted control plane rebuilds its predictor from the stream: the same as one that never
stopped while the stream holds every rollout it learnt from, not once one was purged.

The default predictor (``online``) learns from every completed trajectory, and a control plane
also teaches it, at start, the ledger's completed rollouts that its replay of the stream did not
cover (``learn_from_ledger``, on by default). A rollout purged from the stream (``heddle purge``)
is such a rollout: the control plane that ran it learnt it live, from the features its own
predictions saw, before the later rollouts; a restarted one learns it from the ledger's per-step
figures, after replaying the later ones, whose predictions it re-made without it. Its state
differs. Without learning from the ledger it forgets the rollout, and differs too.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, ControlPlaneService
from heddle.controlplane.live_predictor import PredictionHooks
from heddle.lifecycle.archive import archive_rollout
from heddle.lifecycle.purge import purge_rollouts
from heddle.policy.prediction.base import Progress
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.rollout.trainer_records import TRAINER_RECORDS
from heddle.traces import TraceStep, TraceTrajectory
from heddle.workers.environments import validate_task

pytestmark = pytest.mark.timeout(300)

TIME_SCALE = 1000.0
CONFIG = ControlPlaneConfig(cost_model="qwen3-8b")  # the default predictor, learning on
Fingerprint = tuple[bytes, bytes, float, int, tuple[float, ...]]


@pytest.fixture
def settings(nats_url: str, tmp_path: Path) -> Settings:
    return Settings(nats_url=nats_url, data_dir=tmp_path / "data")


def trace(rollout: int) -> list[TraceTrajectory]:
    """Six trajectories in two groups, of two to four generations."""
    return [
        TraceTrajectory(
            id=f"r{rollout}t{index}",
            group=f"r{rollout}g{index % 2}",
            prompt_tokens=16,
            steps=[
                TraceStep(
                    output_tokens=40 + 30 * step + 7 * index, tool_s=2.0, tool_output_tokens=5
                )
                for step in range(2 + index % 3)
            ],
        )
        for index in range(6)
    ]


def fingerprint(hooks: PredictionHooks | None) -> Fingerprint:
    """The token model's training state, exactly, and what the predictor answers for a few
    trajectories it never saw (survival, siblings and the tool model included)."""
    assert hooks is not None
    online = hooks.online
    stats = online.stats
    probes = [Progress(f"probe{n}", "r1g0", 16).after_generation(40 * n) for n in range(1, 4)]
    answers = tuple(online.predict(p) for p in probes) + tuple(
        online.predict_tool_s(p) for p in probes
    )
    return stats.xtx.tobytes(), stats.xty.tobytes(), stats.yty, stats.num_samples, answers


async def run_rollout(client: HeddleClient, rollout: int) -> str:
    rollout_id = await client.submit(trace=trace(rollout), time_scale=TIME_SCALE)
    summary = await client.wait(rollout_id, timeout_s=120)
    assert summary.num_completed == 6
    return rollout_id


async def caught_up(deployment: InProcessDeployment, client: HeddleClient) -> None:
    """Until the deciders have stored and acknowledged everything in the stream."""
    (consumer,) = deployment.service.consumers.values()
    for _ in range(600):
        last = (await client.bus.stream_state()).last_sequence
        if consumer.stored_position >= last:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("the deciders did not catch up with the stream")


async def uninterrupted(settings: Settings, archive: Path | None = None) -> Fingerprint:
    """Two rollouts on one control plane (the first purged between them when ``archive`` is
    given); its predictor's fingerprint once it has decided everything."""
    options = InProcessOptions(
        num_workers=1, engine_options={"time_scale": str(TIME_SCALE)}, control_plane=CONFIG
    )
    async with (
        InProcessDeployment(settings, options) as deployment,
        HeddleClient(settings) as client,
    ):
        first = await run_rollout(client, 0)
        if archive is not None:
            await archive_rollout(client.bus, first, archive)
            await purge_rollouts(settings, [first], archive)
        await run_rollout(client, 1)
        await caught_up(deployment, client)
        return fingerprint(deployment.service.hooks)


async def restarted(settings: Settings, config: ControlPlaneConfig) -> Fingerprint:
    """A new control plane on the same stream and ledger, once it has replayed and learnt."""
    service = ControlPlaneService(
        settings, config, check_task=validate_task, trainer_records=TRAINER_RECORDS
    )
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    try:
        async with asyncio.timeout(60):
            while not service.ready.is_set():
                assert not running.done(), running.result()
                await asyncio.sleep(0.05)
        return fingerprint(service.hooks)
    finally:
        stop.set()
        await running


async def test_a_restart_rebuilds_the_same_predictor_while_the_stream_holds_what_it_learnt(
    settings: Settings,
) -> None:
    before = await uninterrupted(settings)
    assert before[3] > 0  # it learnt from the completions
    assert await restarted(settings, CONFIG) == before


async def test_a_rollout_purged_from_the_stream_is_learnt_again_from_the_ledger_differently(
    settings: Settings, tmp_path: Path
) -> None:
    before = await uninterrupted(settings, archive=tmp_path / "archive")
    from_ledger = await restarted(settings, CONFIG)
    without_ledger = ControlPlaneConfig(cost_model="qwen3-8b", learn_from_ledger=False)
    forgotten = await restarted(settings, without_ledger)
    assert from_ledger != before and forgotten != before
    assert forgotten[3] < from_ledger[3]  # the ledger taught it the purged rollout
