"""A real Heddle (control plane with its projector, two sim workers) on the test's nats-server,
its ledger in the data dir, and trainer-sized rollouts of trace tasks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import Completed
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.rollout.submission import TaskOptions

TIME_SCALE = 2000.0


@pytest.fixture
def settings(nats_url: str, tmp_path: Path) -> Settings:
    # Small inline events: a completion's arrays go to the object store, as a long one's do.
    return Settings(nats_url=nats_url, data_dir=tmp_path / "data", max_event_bytes=2048)


@pytest.fixture
async def heddle(settings: Settings) -> AsyncIterator[InProcessDeployment]:
    options = InProcessOptions(
        num_workers=2,
        engine_options={"time_scale": str(TIME_SCALE), "model": "qwen3-8b"},
        control_plane=ControlPlaneConfig(
            cost_model="qwen3-8b", predictor=PredictorConfig("oracle"), worker_timeout_s=30.0
        ),
    )
    async with InProcessDeployment(settings, options) as deployment:
        yield deployment


def trace_task(name: str, outputs: list[int]) -> dict[str, Any]:
    steps = [{"output_tokens": n, "tool_s": 1.0 if i < len(outputs) - 1 else 0.0,
              "tool_output_tokens": 5 if i < len(outputs) - 1 else 0}
             for i, n in enumerate(outputs)]  # fmt: skip
    return {"id": name, "group": name, "prompt_tokens": 16, "steps": steps}


async def run_step(client: HeddleClient, step: int, *, groups: int = 2, size: int = 2,
                   tokens: int = 200) -> tuple[str, list[Completed]]:  # fmt: skip
    """One training step's rollout: ``groups`` tasks of two generations, ``size`` samples each;
    its id and its completions as the trainer received them."""
    tasks = [trace_task(f"s{step}g{g}", [tokens, tokens // 2]) for g in range(groups)]
    options = TaskOptions(group_size=size, max_steps=4, max_new_tokens=4096,
                          max_total_tokens=16384)  # fmt: skip
    rollout_id = await client.submit(tasks, environment="trace", task_options=options)
    completions = [c async for c in client.completions(rollout_id)]
    await client.wait(rollout_id, timeout_s=120)
    return rollout_id, sorted(completions, key=lambda c: c.index)
