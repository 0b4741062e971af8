"""A 3-node JetStream cluster on loopback (``heddle.bus.cluster``), started per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from heddle.bus.cluster import LoopbackCluster


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[LoopbackCluster]:
    with LoopbackCluster(tmp_path / "cluster") as cluster:
        yield cluster
