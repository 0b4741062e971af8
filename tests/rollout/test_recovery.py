"""Crash recovery with real processes: the control plane SIGKILLed mid-rollout and restarted, or
a worker SIGKILLed mid-rollout. The rollout completes, a trainer gets every trajectory exactly
once, nothing is decided twice, the re-placements and their re-prefill are counted, and the
ledger verifies against a replay of the stream."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from holdings import holdings

from heddle.bus import Bus, ReplayQuery
from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.controlplane.projector import catch_up
from heddle.events import (
    Completed,
    ContinueTrajectory,
    Event,
    GenerationStarted,
    RolloutFinished,
    WorkerCommand,
    WorkerFailed,
    decode_worker_command,
)
from heddle.events.subjects import COMMANDS_STREAM, rollout_filter
from heddle.ledger import open_ledger
from heddle.replay import open_replay
from heddle.rollout.deployment import LocalDeployment, WorkerPool
from heddle.rollout.driver import RunHooks, RunOptions, run_rollout
from heddle.rollout.progress import ProgressState
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.rollout.submit import CLI_TRAINER
from heddle.workloads import generate

pytestmark = pytest.mark.timeout(240)

TIME_SCALE = 300.0
NUM_TRAJECTORIES = 24


TRACE = generate("search", NUM_TRAJECTORIES, seed=4)


def options(num_workers: int) -> RunOptions:
    return RunOptions(
        plan=RolloutPlan("heddle", trace_specs(TRACE), "workload:search", TIME_SCALE),
        pool=WorkerPool(
            num_workers,
            "sim",
            {"time_scale": str(TIME_SCALE), "model": "qwen3-8b"},
            heartbeat_s=0.5,
        ),
        control_plane=ControlPlaneConfig(
            cost_model="qwen3-8b",
            predictor=PredictorConfig("noisy_oracle"),
            worker_timeout_s=8.0,  # a dead worker is noticed; a starved live one is not failed
        ),
        timeout_s=150,
        show_progress=False,
    )


class Trainer:
    """Collects a rollout's completions through the client while the rollout runs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.traj_ids: list[str] = []
        self.task: asyncio.Task[None] | None = None

    async def start(self, rollout_id: str, deployment: LocalDeployment) -> None:
        self.task = asyncio.create_task(self._collect(rollout_id))

    async def _collect(self, rollout_id: str) -> None:
        # run_rollout submits as the command line does: that trainer owns the rollout
        async with HeddleClient(self.settings, trainer=CLI_TRAINER) as client:
            async for trajectory in client.completions(rollout_id):
                self.traj_ids.append(trajectory.traj_id)

    async def finish(self) -> list[str]:
        assert self.task is not None
        await asyncio.wait_for(self.task, 60)
        return self.traj_ids


async def rollout_events(settings: Settings, rollout_id: str) -> list[Event | WorkerCommand]:
    async with Bus(settings) as bus:
        query = ReplayQuery(filter_subjects=tuple(rollout_filter(rollout_id)))
        events: list[Event | WorkerCommand] = [
            record.message async for record in bus.replay_events(query)
        ]
        commands = bus.replay(
            ReplayQuery(filter_subjects=("heddle.cmd.worker.>",)),
            decode_worker_command,
            COMMANDS_STREAM,
        )
        events += [record.message async for record in commands]
    return events


async def verify(settings: Settings) -> None:
    """Project what the live projector has not yet (replay itself never writes the live
    ledger), then compare it with a rebuild from the stream."""
    live = open_ledger(settings.ledger_url)
    try:
        async with Bus(settings) as bus:
            await catch_up(bus, live)
    finally:
        live.close()
    async with open_replay(settings, live=True) as session:
        report = await session.verify()
    assert report.consistent, report.mismatches
    assert report.unprojected_messages == 0


async def test_a_control_plane_killed_midway_loses_nothing_and_doubles_nothing(
    settings: Settings,
) -> None:
    trainer = Trainer(settings)
    restarts: list[int] = []

    async def crash(state: ProgressState, deployment: LocalDeployment) -> None:
        if restarts or len(state.completed) < NUM_TRAJECTORIES // 4:
            return
        control = deployment.control_plane
        assert control is not None
        control.kill()
        await control.process.wait()
        await asyncio.sleep(1.0)  # the data plane goes on publishing meanwhile
        restarts.append((await deployment.restart_control_plane()).pid)

    hooks = RunHooks(on_submitted=trainer.start, on_progress=crash)
    result = await run_rollout(settings, options(num_workers=2), hooks)
    assert restarts, "the rollout ended before the crash"
    summary = result.summary
    assert summary.num_completed == NUM_TRAJECTORIES and summary.num_failed == 0
    received = await trainer.finish()
    assert sorted(received) == [f"t{i:06d}" for i in range(NUM_TRAJECTORIES)]  # once each

    events = await rollout_events(settings, result.rollout_id)
    completions = Counter(e.traj_id for e in events if isinstance(e, Completed))
    assert set(completions.values()) == {1}
    assert sum(isinstance(e, RolloutFinished) for e in events) == 1
    starts = Counter((e.traj_id, e.step) for e in events if isinstance(e, GenerationStarted))
    assert set(starts.values()) == {1}
    # The control plane routed every step once (workers forward what reaches them after a
    # migration under ids of their own: ``<id>:fwd:<worker>``).
    continues = Counter(
        (e.traj_id, e.step)
        for e in events
        if isinstance(e, ContinueTrajectory) and ":fwd:" not in e.command_id
    )
    assert set(continues.values()) == {1}
    await verify(settings)


async def test_a_dead_workers_trajectories_are_replaced_and_finish(settings: Settings) -> None:
    killed: list[str] = []

    async def kill_worker(state: ProgressState, deployment: LocalDeployment) -> None:
        if killed or len(state.completed) < 2:
            return
        held = await holdings(settings, state.rollout_id, TRACE, min_steps_left=3)
        if not held:
            return
        worker_id, _ = held.most_common(1)[0]  # the worker whose death costs the most
        deployment.workers[worker_id].kill()
        killed.append(worker_id)

    result = await run_rollout(settings, options(num_workers=3), RunHooks(on_progress=kill_worker))
    assert len(killed) == 1
    summary = result.summary
    assert summary.num_completed == NUM_TRAJECTORIES and summary.num_failed == 0
    assert summary.num_replacements > 0
    assert summary.replacement_recomputed_tokens > 0
    async with Bus(settings) as bus:
        query = ReplayQuery(filter_subjects=(f"heddle.evt.worker.{killed[0]}.failed",))
        failures = [r.message async for r in bus.replay_events(query)]
    (failure,) = failures
    assert isinstance(failure, WorkerFailed) and failure.trajectory_ids
    await verify(settings)
