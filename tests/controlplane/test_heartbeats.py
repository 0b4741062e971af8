"""Heartbeats travel on core NATS: an idle deployment stores nothing in HEDDLE_EVENTS, and a
worker whose heartbeats stop is still declared failed after the timeout, not before."""

from __future__ import annotations

import asyncio
import time

from heddle.bus import Bus, ReplayQuery
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig
from heddle.controlplane.liveness import WorkerLiveness
from heddle.events import ExecutorRegistered, WorkerFailed, WorkerHeartbeat, WorkerRegistered
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions

TIMEOUT_S = 1.5


def deployment(settings: Settings, num_workers: int) -> InProcessDeployment:
    control = ControlPlaneConfig(worker_timeout_s=TIMEOUT_S, liveness_check_s=0.1)
    options = InProcessOptions(num_workers=num_workers, heartbeat_s=0.1, control_plane=control)
    return InProcessDeployment(settings, options)


async def test_an_idle_deployment_appends_no_events(settings: Settings) -> None:
    """Once every member has registered, a deployment whose workers beat for two timeouts
    appends nothing, and its workers stay live on heartbeats alone."""
    heard: list[WorkerHeartbeat] = []
    async with deployment(settings, num_workers=2) as plane, Bus(settings) as bus:
        liveness = plane.service.liveness
        assert liveness is not None
        # Idle starts once the members' registrations (the only events of a start: both
        # workers', the tool executor's) are stored and folded, however late a loaded
        # machine starts them.
        await asyncio.wait_for(_members_registered(bus, liveness), 120)
        before = await bus.stream_state()
        subscription = await bus.subscribe_heartbeats(heard.append)
        await asyncio.wait_for(_beats_span(heard, 2 * TIMEOUT_S), 120)
        after = await bus.stream_state()
        await subscription.unsubscribe()
        assert sorted(liveness.live_workers()) == ["w00", "w01"]
        appended = await _events_after(bus, before.last_sequence)
    assert not appended, f"an idle deployment appended {appended}"
    assert after.num_messages == before.num_messages
    assert after.last_sequence == before.last_sequence


async def _members_registered(bus: Bus, liveness: WorkerLiveness) -> None:
    """Until both workers' and the executor's registrations are stored and the workers live."""
    query = ReplayQuery(filter_subjects=("heddle.evt.worker.*.registered", "heddle.evt.tools.>"))
    while True:
        records = [record async for record in bus.replay_events(query)]
        workers = {r.message.worker_id for r in records if isinstance(r.message, WorkerRegistered)}
        executors = [r for r in records if isinstance(r.message, ExecutorRegistered)]
        if workers == {"w00", "w01"} and executors and len(liveness.live_workers()) == 2:
            return
        await asyncio.sleep(0.25)


async def _beats_span(heard: list[WorkerHeartbeat], span_s: float) -> None:
    """Until each worker's heartbeats heard span ``span_s`` (their own clocks)."""
    while True:
        sent_at: dict[str, list[float]] = {}
        for beat in heard:
            sent_at.setdefault(beat.worker_id, []).append(beat.occurred_at)
        spans = [max(times) - min(times) for times in sent_at.values()]
        if set(sent_at) == {"w00", "w01"} and min(spans) > span_s:
            return
        await asyncio.sleep(0.1)


async def _events_after(bus: Bus, sequence: int) -> list[str]:
    query = ReplayQuery(filter_subjects=("heddle.evt.>",), start_sequence=sequence + 1)
    return [type(r.message).__name__ async for r in bus.replay_events(query)]


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
