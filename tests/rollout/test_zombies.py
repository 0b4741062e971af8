"""A zombie worker: SIGSTOPped mid-rollout past its timeout (the control plane declares it failed
and places what it held elsewhere, under new hostings), then SIGCONTed while the rollout runs.
It resumes where it was, writing events of hostings that are over: the gate refuses them, the
worker is told to rejoin and registers afresh. A plain durable consumer on the trainer's
delivery stream receives every trajectory exactly once, and the ledger verifies against the
stream."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter

import pytest
from holdings import holdings
from waiting import until

from heddle.bus import Bus, ConsumerSpec, Delivery, ReplayQuery
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.controlplane.projector import catch_up
from heddle.events import (
    Completed,
    DeadLettered,
    EventT,
    Failed,
    WorkerFailed,
    WorkerRegistered,
    decode_event,
)
from heddle.events.subjects import DEADLETTER_SUBJECT, delivery_stream
from heddle.ledger import open_ledger
from heddle.replay import open_replay
from heddle.rollout.deployment import LocalDeployment, WorkerPool
from heddle.rollout.driver import RunHooks, RunOptions, run_rollout
from heddle.rollout.progress import ProgressState
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.rollout.submit import CLI_TRAINER
from heddle.workloads import generate

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

TIME_SCALE = 4.0
TIMEOUT_S = 2.0
TRACE = generate("search", 16, seed=5)


def options() -> RunOptions:
    return RunOptions(
        plan=RolloutPlan("heddle", trace_specs(TRACE), "workload:search", TIME_SCALE),
        pool=WorkerPool(
            2, "sim", {"time_scale": str(TIME_SCALE), "model": "qwen3-8b"}, heartbeat_s=0.5
        ),
        control_plane=ControlPlaneConfig(
            cost_model="qwen3-8b",
            predictor=PredictorConfig("noisy_oracle"),
            worker_timeout_s=TIMEOUT_S,
        ),
        timeout_s=240,
        show_progress=False,
    )


class Zombie:
    """Pauses the worker holding the most unfinished trajectories until the control plane has
    declared it failed, then lets it run on, and waits until it registered afresh."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.worker_id = ""
        self.task: asyncio.Task[None] | None = None
        self.has_rejoined = False

    async def maybe_pause(self, state: ProgressState, deployment: LocalDeployment) -> None:
        if self.worker_id:
            return
        held = await holdings(self.settings, state.rollout_id, TRACE, min_steps_left=2)
        if not held:
            return
        self.worker_id, _ = held.most_common(1)[0]
        pid = deployment.workers[self.worker_id].pid
        os.kill(pid, signal.SIGSTOP)
        self.task = asyncio.create_task(self._resume_once_failed(pid))

    async def _resume_once_failed(self, pid: int) -> None:
        try:
            await until(self._is_declared_failed, "the paused worker declared failed", 60)
            await asyncio.sleep(1.0)  # its trajectories are placed elsewhere meanwhile
        finally:
            os.kill(pid, signal.SIGCONT)
        # Told to rejoin, the zombie registers again as a fresh incarnation (while the rollout
        # still runs: afterwards the workers are stopped).
        await until(self._has_rejoined, "the zombie registered again", 60)
        self.has_rejoined = True

    async def _has_rejoined(self) -> bool:
        subject = f"heddle.evt.worker.{self.worker_id}.registered"
        registered = await events_on(self.settings, subject)
        return len({e.incarnation for e in registered if isinstance(e, WorkerRegistered)}) >= 2

    async def _is_declared_failed(self) -> bool:
        return bool(await events_on(self.settings, f"heddle.evt.worker.{self.worker_id}.failed"))


async def events_on(settings: Settings, subject: str) -> list[EventT]:
    async with Bus(settings) as bus:
        query = ReplayQuery(filter_subjects=(subject,))
        return [record.message async for record in bus.replay_events(query)]


async def plain_consumer_records(settings: Settings, rollout_id: str) -> Counter[str]:
    """Each trajectory's records on a plain durable consumer of the CLI trainer's stream
    (``run_rollout`` submits as it)."""
    received: Counter[str] = Counter()

    async def take(batch: list[Delivery[EventT]]) -> None:
        for delivery in batch:
            if isinstance(delivery.message, Completed | Failed):
                received[delivery.message.traj_id] += 1

    spec = ConsumerSpec(
        durable="plain",
        stream=delivery_stream(CLI_TRAINER),
        filter_subjects=(f"heddle.out.{CLI_TRAINER}.{rollout_id}.>",),
        role=f"trainer-{CLI_TRAINER}",
        fetch_wait_s=0.5,
    )
    async with Bus(settings) as bus:
        await bus.batch_runner(spec, decode_event, take).run(until_idle=True)
    return received


async def verify(settings: Settings) -> None:
    live = open_ledger(settings.ledger_url)
    try:
        async with Bus(settings) as bus:
            await catch_up(bus, live)
    finally:
        live.close()
    async with open_replay(settings, live=True) as session:
        report = await session.verify()
    assert report.consistent, report.mismatches


async def test_a_resumed_zombie_is_fenced_and_every_trajectory_is_delivered_once(
    settings: Settings,
) -> None:
    zombie = Zombie(settings)
    result = await run_rollout(settings, options(), RunHooks(on_progress=zombie.maybe_pause))
    assert zombie.task is not None, "no worker held a trajectory long enough to pause it"
    await zombie.task
    assert result.summary.num_completed == len(TRACE) and result.summary.num_failed == 0

    received = await plain_consumer_records(settings, result.rollout_id)
    assert received == Counter({f"t{i:06d}": 1 for i in range(len(TRACE))})

    worker_events = await events_on(settings, f"heddle.evt.worker.{zombie.worker_id}.>")
    failed = next(e for e in worker_events if isinstance(e, WorkerFailed))
    registered = [e for e in worker_events if isinstance(e, WorkerRegistered)]
    assert failed.trajectory_ids and failed.incarnation == registered[0].incarnation
    assert zombie.has_rejoined
    # What it wrote for the hostings it lost was refused (and none of it delivered).
    letters = await events_on(settings, DEADLETTER_SUBJECT)
    stale = [
        letter
        for letter in letters
        if isinstance(letter, DeadLettered)
        and f"of worker {zombie.worker_id} is stale" in letter.reason
    ]
    completions = [
        e for e in await events_on(settings, f"heddle.evt.traj.{result.rollout_id}.*.completed.*")
    ]
    assert stale  # the zombie wrote for hostings it had lost
    assert len(stale) >= len(completions) - len(TRACE)  # every extra completion was refused
    await verify(settings)
