"""Liveness discounts the control plane's own disconnection: a nats-server restart longer than
the worker timeout fails no live worker (heartbeats sent while the control plane was cut off
never reached it; silence counts from its reconnection), while a worker that stays silent
after the restart is still failed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from waiting import until

from controlplane.test_heartbeats import failures, first_failures
from heddle.bus import Bus
from heddle.bus.server import EmbeddedNatsServer
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig
from heddle.events import WorkerHeartbeat, WorkerRegistered
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions

TIMEOUT_S = 4.0
OUTAGE_S = 2.5 * TIMEOUT_S


async def test_a_nats_restart_fails_no_live_worker(tmp_path: Path) -> None:
    with EmbeddedNatsServer(tmp_path / "nats") as server:
        settings = Settings(nats_url=server.url, data_dir=tmp_path / "data")
        control = ControlPlaneConfig(
            worker_timeout_s=TIMEOUT_S, liveness_check_s=0.1, project_ledger=False
        )
        # Heartbeats rarer than checks: the first check after the reconnection comes before
        # the worker's first heartbeat does.
        options = InProcessOptions(num_workers=1, heartbeat_s=1.0, control_plane=control)
        async with InProcessDeployment(settings, options) as plane:
            liveness = plane.service.liveness
            assert liveness is not None
            await until(lambda: liveness.live_workers() == ["w00"], "w00 is live")
            server.stop()
            await asyncio.sleep(OUTAGE_S)
            server.start()
            async with Bus(settings) as bus:
                # Three timeouts after the restart the worker has been checked many times.
                deadline = time.monotonic() + 3 * TIMEOUT_S
                while time.monotonic() < deadline:
                    assert not await failures(bus), "a live worker was failed"
                    await asyncio.sleep(0.2)
                assert liveness.live_workers() == ["w00"]


async def test_a_worker_silent_after_the_restart_still_fails(tmp_path: Path) -> None:
    with EmbeddedNatsServer(tmp_path / "nats") as server:
        settings = Settings(nats_url=server.url, data_dir=tmp_path / "data")
        control = ControlPlaneConfig(
            worker_timeout_s=TIMEOUT_S, liveness_check_s=0.1, project_ledger=False
        )
        options = InProcessOptions(num_workers=0, control_plane=control)
        async with InProcessDeployment(settings, options):
            async with Bus(settings) as bus:
                now = time.time()
                await bus.publish(
                    WorkerRegistered(
                        event_id="wx:registered", occurred_at=now, worker_id="wx", engine="sim"
                    )
                )
                await bus.publish_telemetry(
                    WorkerHeartbeat(event_id="wx:hb", occurred_at=now, worker_id="wx", sequence=1)
                )
            server.stop()
            await asyncio.sleep(OUTAGE_S)
            server.start()
            restarted_s = time.time()
            async with Bus(settings) as bus:
                [failure] = await asyncio.wait_for(first_failures(bus), 60)
    assert failure.worker_id == "wx"
    assert failure.occurred_at - restarted_s > TIMEOUT_S, "failed before a timeout's silence"
