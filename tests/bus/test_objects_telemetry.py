"""Object store blobs and core-NATS telemetry."""

from __future__ import annotations

import asyncio
import os

import pytest

from heddle.bus import Bus, ObjectNotFound
from heddle.events import WorkerTelemetry


async def test_objects_round_trip_across_chunks(bus: Bus) -> None:
    blob = os.urandom(700 * 1024 + 5)
    assert await bus.put_object("kv/r1/t000001/3", blob) == len(blob)
    assert await bus.get_object("kv/r1/t000001/3") == blob
    await bus.put_object("kv/r1/t000001/3", b"smaller")
    assert await bus.get_object("kv/r1/t000001/3") == b"smaller"
    await bus.delete_object("kv/r1/t000001/3")
    with pytest.raises(ObjectNotFound):
        await bus.get_object("kv/r1/t000001/3")
    with pytest.raises(ObjectNotFound):
        await bus.get_object("never-stored")


async def test_telemetry_reaches_subscribers(bus: Bus) -> None:
    received: list[WorkerTelemetry] = []
    arrived = asyncio.Event()

    async def handle(telemetry: WorkerTelemetry) -> None:
        received.append(telemetry)
        arrived.set()

    everyone = await bus.subscribe_telemetry(handle)
    only_w01 = await bus.subscribe_telemetry(handle, worker_id="w01")
    await bus.client.publish("heddle.telemetry.worker.w00", b"not telemetry")
    report = WorkerTelemetry(worker_id="w00", sent_at=1.0, num_running=3, num_waiting=1)
    await bus.publish_telemetry(report)
    await asyncio.wait_for(arrived.wait(), 5)
    await bus.client.flush()
    await asyncio.sleep(0.05)
    await everyone.close()
    await only_w01.close()
    assert received == [report]
    assert everyone.num_dropped == 1
