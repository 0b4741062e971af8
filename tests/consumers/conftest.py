"""Fixtures of the consumer tests: settings and a connected ``Bus`` on the test's nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from heddle.bus import Bus, BusOptions, PublishOptions
from heddle.config import Settings


@pytest.fixture
def settings(nats_url: str, tmp_path: Path) -> Settings:
    return Settings(nats_url=nats_url, data_dir=tmp_path / "data")


@pytest.fixture
async def bus(settings: Settings) -> AsyncIterator[Bus]:
    options = BusOptions(publish=PublishOptions(ack_timeout_s=2.0, retry_deadline_s=20.0))
    async with Bus(settings, options) as connected:
        yield connected
