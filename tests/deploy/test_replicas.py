"""Stream replicas: 1 on one server, 3 on a cluster (asked of the server), and an existing
stream with another count is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from heddle.bus import Bus, ReplicasMismatch
from heddle.bus.cluster import LoopbackCluster
from heddle.config import Settings
from heddle.events.subjects import COMMANDS_STREAM, EVENTS_STREAM, TOOLS_STREAM


async def test_one_server_gets_one_replica(nats_url: str, tmp_path: Path) -> None:
    async with Bus(Settings(nats_url=nats_url, data_dir=tmp_path)) as bus:
        assert bus.num_replicas == 1
        info = await bus.js.stream_info(EVENTS_STREAM)
        assert info.config.num_replicas == 1


async def test_three_replicas_on_one_server_is_a_clear_error(nats_url: str, tmp_path: Path) -> None:
    settings = Settings(nats_url=nats_url, data_dir=tmp_path, nats_replicas=3)
    with pytest.raises(ReplicasMismatch, match="single server takes --nats-replicas 1"):
        async with Bus(settings):
            pass


async def test_a_cluster_gets_three_replicas_and_refuses_another_count(
    nats_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    settings = Settings(nats_url=nats_cluster.url, data_dir=tmp_path)
    async with Bus(settings) as bus:
        assert bus.num_replicas == 3
        for stream in (EVENTS_STREAM, COMMANDS_STREAM, TOOLS_STREAM):
            info = await bus.js.stream_info(stream)
            assert info.config.num_replicas == 3
            assert info.cluster is not None and len(info.cluster.replicas or []) == 2
    with pytest.raises(ReplicasMismatch, match=r"HEDDLE_EVENTS has 3 replica\(s\).*expects 1"):
        async with Bus(Settings(nats_url=nats_cluster.url, data_dir=tmp_path, nats_replicas=1)):
            pass
    async with Bus(Settings(nats_url=nats_cluster.node_url(2), data_dir=tmp_path)) as bus:
        assert (await bus.stream_state()).num_messages == 0  # any node serves the streams
