"""The control plane's store guard against a nats-server it does not run, whose store (a small
real tmpfs) fills: it cannot read the server's health, so it reports the refusal from its own
writes going unacknowledged while the server still answers, holds its publishes past their
deadline (they pause, not fail), says what the operator does, and sees writes taken again once
the operator has reset JetStream (here ``reset_jetstream``, as a reload would)."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

from waiting import until

from heddle.bench.small_disk import SmallDisk
from heddle.bus import Bus, BusOptions, PublishAck, PublishOptions
from heddle.bus.server import EmbeddedNatsServer
from heddle.bus.store_health import reset_jetstream
from heddle.config import Settings
from heddle.controlplane.store_guard import StoreGuard, StoreGuardConfig
from heddle.events import WorkerRegistered
from heddle.observability import Metrics

CONFIG = StoreGuardConfig(interval_s=0.2, stall_s=2.0)


def registered(worker_id: str) -> WorkerRegistered:
    return WorkerRegistered(
        event_id=f"{worker_id}:registered",
        occurred_at=time.time(),
        worker_id=worker_id,
        engine="sim",
    )


class Producer:
    """Publishes one event after another, as a worker does, until asked to stop."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.acks: list[PublishAck] = []
        self.is_stopping = False

    async def run(self) -> None:
        for index in itertools.count():
            if self.is_stopping:
                return
            self.acks.append(await self.bus.publish(registered(f"w{index}")))


async def test_refused_writes_of_a_server_heddle_does_not_run_are_reported_and_paused(
    server_on_a_small_disk: tuple[EmbeddedNatsServer, SmallDisk], tmp_path: Path
) -> None:
    server, disk = server_on_a_small_disk
    assert server.pid is not None and server.monitor_port is not None
    settings = Settings(nats_url=server.url, data_dir=tmp_path / "data")
    options = BusOptions(publish=PublishOptions(ack_timeout_s=1.0, retry_deadline_s=5.0))
    metrics = Metrics()
    async with Bus(settings, options) as bus:
        guard = StoreGuard(bus, settings, CONFIG, metrics)
        checks = asyncio.create_task(guard.run())
        disk.fill()
        producer = Producer(bus)
        producing = asyncio.create_task(producer.run())
        await until(lambda: not guard.report.is_writable, "the refusal reported", 60)
        assert "acknowledged no write" in guard.report.reason
        assert "reload nats-server with JetStream disabled" in guard.report.action
        assert metrics.registry.get_sample_value("heddle_stream_store_writable") == 0
        stalled_at = len(producer.acks)
        await asyncio.sleep(2 * options.publish.retry_deadline_s)
        assert not producing.done(), "a held publish failed at its deadline instead of pausing"
        assert len(producer.acks) == stalled_at

        disk.free()
        await asyncio.to_thread(
            reset_jetstream, server.config_path, server.store_dir, server.pid, server.monitor_port
        )
        await until(lambda: len(producer.acks) > stalled_at, "the paused publish stored", 60)
        await until(lambda: guard.report.is_writable, "writes taken again reported", 60)
        producer.is_stopping = True
        await asyncio.wait_for(producing, 60)
        checks.cancel()
        state = await bus.stream_state()
    # Every message stored once, in order. (The write that met the full disk used up its
    # sequence number: the stream may start one later, a gap readers skip.)
    sequences = [ack.sequence for ack in producer.acks]
    assert not any(ack.duplicate for ack in producer.acks)
    assert sequences == list(range(sequences[0], sequences[0] + len(sequences)))
    assert (state.num_messages, state.last_sequence) == (len(sequences), sequences[-1])
    assert metrics.registry.get_sample_value("heddle_stream_store_writable") == 1
