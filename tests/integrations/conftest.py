"""A real Heddle (control plane, two sim workers, a tool executor) on the test's nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions

TIME_SCALE = 400.0


@pytest.fixture
def settings(nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    data_dir = tmp_path / "data"
    monkeypatch.setenv("HEDDLE_NATS_URL", nats_url)
    monkeypatch.setenv("HEDDLE_DATA_DIR", str(data_dir))
    return Settings(nats_url=nats_url, data_dir=data_dir)


@pytest.fixture
async def heddle(settings: Settings) -> AsyncIterator[InProcessDeployment]:
    control = ControlPlaneConfig(
        cost_model="qwen3-8b", predictor=PredictorConfig("oracle"), worker_timeout_s=5.0
    )
    options = InProcessOptions(
        num_workers=2,
        engine_options={"time_scale": str(TIME_SCALE), "model": "qwen3-8b"},
        control_plane=control,
    )
    async with InProcessDeployment(settings, options) as deployment:
        yield deployment
