"""What a full disk does to a real nats-server's JetStream store, and what brings it back
(``heddle.bus.store_health``), on a small real tmpfs filled to ENOSPC.

Pinned here: the stream keeps its write error after space is freed; neither a stream
configuration update nor a reload of an unchanged configuration clears it; a reload with
JetStream disabled, then enabled (``reset_jetstream``) does, without a restart and without
losing or doubling a message (a publish retried with the same id is stored once)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from heddle.bench.small_disk import SmallDisk
from heddle.bus import Bus, BusOptions, PublishError, PublishOptions
from heddle.bus.server import EmbeddedNatsServer
from heddle.bus.store_health import reset_jetstream, store_health
from heddle.config import Settings
from heddle.events import EventT, WorkerRegistered
from heddle.events.subjects import EVENTS_STREAM

SHORT = BusOptions(publish=PublishOptions(ack_timeout_s=1.0, retry_deadline_s=3.0))
"""For publishes expected to be refused: they fail at this deadline (the others wait longer)."""


def registered(index: int) -> EventT:
    return WorkerRegistered(
        event_id=f"w{index}:registered",
        occurred_at=time.time(),
        worker_id=f"w{index}",
        engine="sim",
    )


async def _refused(bus: Bus, event: EventT) -> bool:
    try:
        await bus.publish(event)
    except PublishError:
        return True
    return False


async def _writes_until_refused(bus: Bus, first: int, limit: int = 256) -> int:
    """How many writes from ``registered(first)`` on were stored before one was refused."""
    for stored in range(limit):
        if await _refused(bus, registered(first + stored)):
            return stored
    raise AssertionError(f"{limit} writes on a full disk were stored")


async def test_a_full_disk_wedges_the_stream_until_jetstream_is_reset(
    server_on_a_small_disk: tuple[EmbeddedNatsServer, SmallDisk], tmp_path: Path
) -> None:
    server, disk = server_on_a_small_disk
    assert server.monitor_port is not None and server.pid is not None
    settings = Settings(nats_url=server.url, data_dir=tmp_path / "data")
    async with Bus(settings) as bus, Bus(settings, SHORT) as short:
        await bus.publish_many([registered(i) for i in range(10)])
        assert store_health(server.monitor_port, disk.path).is_writable
        disk.fill()
        # The file store's last page may still hold a few small writes: a full disk refuses
        # the first write that needs a new page.
        stored = await _writes_until_refused(short, first=10)
        next_index = 10 + stored
        health = store_health(server.monitor_port, disk.path)
        assert "no space left on device" in health.write_error
        assert health.free_bytes is not None and health.free_bytes < 1 << 20

        disk.free()
        assert await _refused(short, registered(next_index)), (
            "the stream took writes with space back"
        )
        info = await bus.js.stream_info(EVENTS_STREAM)
        await bus.js.update_stream(info.config)  # a configuration update does not clear it
        server_process_reloads(server)  # nor does a reload of the same configuration
        assert await _refused(short, registered(next_index))
        assert not store_health(server.monitor_port, disk.path).is_writable

        reset_jetstream(server.config_path, server.store_dir, server.pid, server.monitor_port)
        assert store_health(server.monitor_port, disk.path).is_writable
        ack = await bus.publish(registered(next_index))
        again = await bus.publish(registered(next_index))  # a publisher's retry, same id
        state = await bus.stream_state()
    assert not ack.duplicate and again.duplicate and again.sequence == ack.sequence
    assert (state.num_messages, state.last_sequence) == (next_index + 1, next_index + 1), (
        "nothing lost or doubled"
    )


def server_process_reloads(server: EmbeddedNatsServer) -> None:
    """SIGHUP: the server reloads its unchanged configuration file (logged, then done)."""
    before = server.log_path.read_text().count("Reloaded server configuration")
    assert server.pid is not None
    os.kill(server.pid, signal.SIGHUP)
    deadline = time.monotonic() + 30
    while server.log_path.read_text().count("Reloaded server configuration") == before:
        assert time.monotonic() < deadline, "the server did not reload"
        time.sleep(0.05)
