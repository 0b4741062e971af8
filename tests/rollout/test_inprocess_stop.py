"""An in-process deployment stops within its bound even when a part ignores the request."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

import heddle.rollout.inprocess as inprocess
from heddle.config import Settings
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions


async def test_a_part_that_does_not_stop_is_cancelled_with_a_warning_showing_where(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_run_agents = inprocess.run_agents

    async def stubborn_workers(*args: Any, **kwargs: Any) -> list[str]:
        failed = await real_run_agents(*args, **kwargs)
        await asyncio.Event().wait()  # never returns once asked to stop
        return failed

    monkeypatch.setattr(inprocess, "run_agents", stubborn_workers)
    settings = Settings(nats_url=nats_url, data_dir=tmp_path / "data")
    options = InProcessOptions(num_workers=1, stop_timeout_s=1.0)
    with caplog.at_level(logging.WARNING, logger=inprocess.__name__):
        # The hang would never end: a generous bound (a wait, not a timing assertion).
        async with asyncio.timeout(300):
            async with InProcessDeployment(settings, options) as deployment:
                tasks = list(deployment._tasks)
    assert all(task.done() for task in tasks)
    assert tasks[1].cancelled() and not tasks[0].cancelled()  # the control plane stopped itself
    (warning,) = [r for r in caplog.records if "did not stop" in r.getMessage()]
    assert "workers and tools" in warning.getMessage()
    assert "stubborn_workers" in warning.getMessage()
