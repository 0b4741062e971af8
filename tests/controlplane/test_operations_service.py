"""The operations service on a running control plane (in process, a real nats-server): every
kind of bad request gets its error reply, the service keeps answering, an accepted request is
recorded before the command it causes, and `heddle ops` sends the same requests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heddle.bus import Bus, ReplayQuery
from heddle.bus.micro import ServiceRefusal, request
from heddle.cli import app
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, ControlPlaneService
from heddle.controlplane.operations import ops_subject
from heddle.events import (
    Completed,
    Drain,
    RolloutSubmitted,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
    WorkerRegistered,
    decode_worker_command,
)
from heddle.events.subjects import COMMANDS_STREAM
from heddle.workers.environments import validate_task

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def bus(nats_url: str, tmp_path: Path) -> AsyncIterator[Bus]:
    """A running control plane (no ledger) that knows w0 and rollout r1 (t0 running, t1
    completed); the bus to talk to it."""
    settings = Settings(nats_url=nats_url, data_dir=tmp_path)
    config = ControlPlaneConfig(project_ledger=False, learn_from_ledger=False)
    service = ControlPlaneService(settings, config, check_task=validate_task)
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    try:
        await asyncio.wait_for(service.ready.wait(), timeout=60)
        async with Bus(settings) as bus:
            await bus.publish_many(_history())
            await _until_known(bus)
            yield bus
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=30)


def _history() -> list[object]:
    spec = TrajectorySpec(group_id="g0", index=0, environment="trace")
    return [
        WorkerRegistered(event_id="w0:reg", occurred_at=1e10, worker_id="w0", engine="sim"),
        RolloutSubmitted(
            event_id="r1:submitted", rollout_id="r1", occurred_at=1.0, policy="heddle",
            num_trajectories=2,
        ),
        *(
            TrajectorySubmitted(
                event_id=f"r1:{t}:submitted", rollout_id="r1", occurred_at=1.0, traj_id=t,
                spec=spec,
            )
            for t in ("t0", "t1")
        ),
        TrajectoryPlaced(event_id="r1:t1:placed", rollout_id="r1", occurred_at=1.5, traj_id="t1",
                         worker_id="w0", epoch=1),
        Completed(event_id="r1:t1:completed", rollout_id="r1", occurred_at=2.0, traj_id="t1",
                  num_steps=1, worker_id="w0", epoch=1),
    ]  # fmt: skip


async def _until_known(bus: Bus) -> None:
    async with asyncio.timeout(120):
        while True:
            try:
                body = await request(bus, ops_subject("trajectory.info"),
                                     b'{"rollout_id":"r1","traj_id":"t1"}')  # fmt: skip
                if json.loads(body)["state"] == "completed":
                    return
            except ServiceRefusal:
                pass
            await asyncio.sleep(0.1)


BAD = [
    ("worker.drain", b"{not json", "400", "malformed JSON"),
    ("worker.drain", b'{"worker_id":"w0","bogus":1}', "400", "unknown field"),
    ("worker.drain", b'{"worker_id":["w0"]}', "400", "Expected `str`"),
    ("worker.drain", b'{"worker_id":"nosuch"}', "404", "unknown worker"),
    ("trajectory.abort", b'{"rollout_id":"r1","traj_id":"t9"}', "404", "unknown trajectory"),
    ("trajectory.abort", b'{"rollout_id":"r1","traj_id":"t1"}', "409", "has completed"),
    ("trajectory.reprioritize", b'{"rollout_id":"r1","traj_id":"t0"}', "400", "priority"),
    ("rollout.cancel", b'{"rollout_id":"ghost"}', "404", "unknown rollout"),
    ("worker.drain", b'{"worker_id":"w0","reason":"' + b"x" * 900_000 + b'"}', "400", "exceeds"),
]


@pytest.mark.parametrize(("endpoint", "body", "code", "fragment"), BAD)
async def test_a_bad_request_gets_its_error_and_the_service_goes_on(
    bus: Bus, endpoint: str, body: bytes, code: str, fragment: str
) -> None:
    with pytest.raises(ServiceRefusal) as refused:
        await request(bus, ops_subject(endpoint), body)
    assert refused.value.code == code and fragment in refused.value.message
    status = json.loads(await request(bus, ops_subject("status"), b""))
    assert [r["rollout_id"] for r in status["rollouts"]] == ["r1"]  # no phantom rollout


async def test_a_drain_is_recorded_then_sent_to_the_worker(bus: Bus) -> None:
    reply = json.loads(
        await request(bus, ops_subject("worker.drain"), b'{"worker_id":"w0","operator":"ana"}')
    )
    assert (reply["event"], reply["operator"]) == ("worker.drain_requested", "ana")
    query = ReplayQuery(filter_subjects=("heddle.cmd.worker.w0.drain",))
    async with asyncio.timeout(120):
        while True:
            reader = bus.replay(query, decode_worker_command, COMMANDS_STREAM)
            drains = [r.message async for r in reader if isinstance(r.message, Drain)]
            if drains:
                break
            await asyncio.sleep(0.1)
    assert drains[0].command_id.startswith(reply["event_id"])
    with pytest.raises(ServiceRefusal) as again:
        await request(bus, ops_subject("worker.drain"), b'{"worker_id":"w0"}')
    assert again.value.code == "409"


async def test_heddle_ops_sends_the_same_requests(bus: Bus) -> None:
    runner = CliRunner()
    base = ["--nats-url", bus.url, "--data-dir", str(bus.settings.data_dir), "ops"]
    ok = await asyncio.to_thread(runner.invoke, app, [*base, "rollout-info", "r1"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["num_completed"] == 1
    refused = await asyncio.to_thread(runner.invoke, app, [*base, "abort", "r1", "t1"])
    assert refused.exit_code == 1 and "409" in refused.output
