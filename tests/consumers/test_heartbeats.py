"""Heartbeats travel on core NATS: an idle deployment stores nothing in HEDDLE_EVENTS, and a
worker whose heartbeats stop is still declared failed after the timeout, not before."""

from __future__ import annotations

import asyncio
import time

from heddle.bus import Bus, ReplayQuery
from heddle.config import Settings
from heddle.consumers import ControlPlaneConfig
from heddle.events import WorkerFailed, WorkerHeartbeat, WorkerRegistered
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions

TIMEOUT_S = 1.5


def deployment(settings: Settings, num_workers: int) -> InProcessDeployment:
    control = ControlPlaneConfig(worker_timeout_s=TIMEOUT_S, liveness_check_s=0.1)
    options = InProcessOptions(num_workers=num_workers, heartbeat_s=0.1, control_plane=control)
    return InProcessDeployment(settings, options)


async def test_an_idle_deployment_appends_no_events(settings: Settings) -> None:
    heard: list[WorkerHeartbeat] = []
    enough = asyncio.Event()

    def hear(heartbeat: WorkerHeartbeat) -> None:
        heard.append(heartbeat)
        if len(heard) >= 20:  # ten heartbeats of each worker
            enough.set()

    async with deployment(settings, num_workers=2) as plane, Bus(settings) as bus:
        subscription = await bus.subscribe_heartbeats(hear)
        assert plane.service.liveness is not None
        # Registrations (workers', the tool executor's) are events: idle starts once both
        # workers are live and the stream has stopped growing.
        before = await bus.stream_state()
        for _ in range(600):
            await asyncio.sleep(0.25)
            now = await bus.stream_state()
            workers = sorted(plane.service.liveness.live_workers())
            if workers == ["w00", "w01"] and now.last_sequence == before.last_sequence:
                break
            before = now
        heard.clear()
        enough.clear()
        await asyncio.wait_for(enough.wait(), 60)
        after = await bus.stream_state()
        await subscription.unsubscribe()
        assert plane.service.liveness is not None
        assert sorted(plane.service.liveness.live_workers()) == ["w00", "w01"]
    assert after.num_messages == before.num_messages
    assert after.last_sequence == before.last_sequence
    assert {beat.worker_id for beat in heard} == {"w00", "w01"}


async def test_a_worker_whose_heartbeats_stop_fails_after_the_timeout(settings: Settings) -> None:
    async with deployment(settings, num_workers=0), Bus(settings) as bus:
        await bus.publish(
            WorkerRegistered(
                event_id="wx:registered", occurred_at=time.time(), worker_id="wx", engine="sim"
            )
        )
        last_beat_s = 0.0
        for sequence in range(1, 16):  # 1.5 s of heartbeats: longer than the timeout
            last_beat_s = time.time()
            heartbeat = WorkerHeartbeat(
                event_id=f"wx:hb:{sequence}",
                occurred_at=last_beat_s,
                worker_id="wx",
                sequence=sequence,
            )
            await bus.publish_telemetry(heartbeat)
            await asyncio.sleep(0.1)
            assert not await failures(bus), "failed while its heartbeats still came"
        [failure] = await asyncio.wait_for(first_failures(bus), 60)
    assert failure.worker_id == "wx" and "no heartbeat" in failure.reason
    assert failure.occurred_at - last_beat_s > TIMEOUT_S


async def failures(bus: Bus) -> list[WorkerFailed]:
    query = ReplayQuery(filter_subjects=("heddle.evt.worker.*.failed",))
    records = [record async for record in bus.replay_events(query)]
    return [r.message for r in records if isinstance(r.message, WorkerFailed)]


async def first_failures(bus: Bus) -> list[WorkerFailed]:
    found = await failures(bus)
    while not found:  # the stream has no notification to wait on
        await asyncio.sleep(0.1)
        found = await failures(bus)
    return found


async def test_a_control_plane_that_did_not_run_fails_no_worker_for_it(settings: Settings) -> None:
    """The process stops running for twice the timeout (here: the event loop blocked); the
    heartbeats sent meanwhile are read only after it resumes. Its silence is not the worker's."""
    async with deployment(settings, num_workers=0), Bus(settings) as bus:
        await bus.publish(
            WorkerRegistered(
                event_id="wy:registered", occurred_at=time.time(), worker_id="wy", engine="sim"
            )
        )
        sequence = 0

        async def beat() -> None:
            nonlocal sequence
            sequence += 1
            await bus.publish_telemetry(
                WorkerHeartbeat(
                    event_id=f"wy:hb:{sequence}",
                    occurred_at=time.time(),
                    worker_id="wy",
                    sequence=sequence,
                )
            )

        for _ in range(10):
            await beat()
            await asyncio.sleep(0.1)
        time.sleep(2 * TIMEOUT_S)  # noqa: ASYNC251 (the stall under test)
        await asyncio.sleep(0.3)  # queued heartbeats are read a moment after it resumes
        for _ in range(30):  # three timeouts of live heartbeats
            await beat()
            await asyncio.sleep(0.1)
        assert not await failures(bus), "a live worker was failed for the control plane's stall"
