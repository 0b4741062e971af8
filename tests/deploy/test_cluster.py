"""The loopback cluster under faults: acknowledged events survive the SIGKILL of the stream's
leader, publishing carries on through the election, and the restarted node catches up. The
whole rollout under a node kill and a leader kill is ``heddle bench cluster`` (benchmark test
below, deselected by default)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from heddle.bench.cluster import ClusterBenchConfig, run_bench
from heddle.bench.stream_watch import read_stream, wait_leader
from heddle.bus import Bus, BusOptions, PublishOptions
from heddle.bus.cluster import LoopbackCluster
from heddle.config import Settings
from heddle.events.subjects import EVENTS_STREAM


async def _publish(bus: Bus, numbers: range) -> None:
    for n in numbers:
        await bus.publish_raw("heddle.evt.deadletter.operator", b'{"n": %d}' % n, f"probe-{n}")


async def _wait_replicas_current(bus: Bus, timeout_s: float = 30.0) -> None:
    """Until every follower of the events stream is current (the restarted node caught up):
    a replay consumer placed on a node still catching up would read its older copy."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = await bus.js.stream_info(EVENTS_STREAM)
        peers = info.cluster.replicas if info.cluster is not None else None
        if peers and len(peers) == 2 and all(p.current and not p.lag for p in peers):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the restarted node did not catch up")


async def test_acked_events_survive_the_leader_kill(
    nats_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    settings = Settings(nats_url=nats_cluster.url, data_dir=tmp_path)
    # A publish sent into the election is resent after 1 s (same id, stored once).
    options = BusOptions(publish=PublishOptions(ack_timeout_s=1.0))
    async with Bus(settings, options) as bus:
        await _publish(bus, range(200))
        acked = await read_stream(bus)
        leader = await wait_leader(bus)
        nats_cluster.kill(nats_cluster.index_of(leader))
        new_leader = await wait_leader(bus, not_this=leader)
        await _publish(bus, range(200, 300))
        await asyncio.to_thread(nats_cluster.restart, nats_cluster.index_of(leader))
        await _wait_replicas_current(bus)
        after = await read_stream(bus)
        info = await bus.js.stream_info(EVENTS_STREAM)
    assert len(acked) == 200 and new_leader != leader
    assert all(after.get(seq) == value for seq, value in acked.items())
    assert len(after) == 300  # nothing lost, nothing stored twice
    assert info.config.num_replicas == 3


@pytest.mark.benchmark
async def test_bench_cluster_loses_nothing(tmp_path: Path) -> None:
    config = ClusterBenchConfig(num_trajectories=24, time_scale=20.0)
    document = await run_bench(config, tmp_path, ("single", "node_kill", "leader_kill"))
    for run in document["runs"]:
        assert run["lost"] == 0 and run["duplicates"] == 0, run
        assert run["completions_received"] == run["completions_expected"], run
        assert run["ledger_consistent"] and not run["failed_processes"], run
    assert document["runs"][2]["leader_changes"] >= 1
