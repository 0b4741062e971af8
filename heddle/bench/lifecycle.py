"""``heddle bench lifecycle``: what a simulated training run leaves on disk, with and without
retention, and how fast rollouts are archived and purged.

One rollout a step on an in-process deployment (sim engine, ``time_scale``), four trajectories of
two generations (``tokens`` then ``tokens / 2`` output tokens, a tool call between); with
retention, ``keep`` rollouts are kept and the rest archived then purged every ``every`` steps.
The NATS server is this benchmark's own, compacting every second (a stock one: every 2 minutes),
so the disk figures are after compaction. Reported: the JetStream store's size (``*.blk``
files) and the ledger's (database and WAL) at the end and at their largest, bytes per output
token and per step, and archive and purge throughput (events per second, archive MB/s).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from heddle.bus.server import EmbeddedNatsServer
from heddle.client import HeddleClient
from heddle.config import RetentionPolicy, Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.lifecycle.retention import RetentionReport, apply_retention
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.rollout.submission import TaskOptions

COMPACT_EVERY_S = "1s"


@dataclass(frozen=True)
class LifecycleConfig:
    steps: int = 200
    tokens: int = 1500
    keep: int | None = 5
    """Rollouts kept (None: no retention)."""
    every: int = 20
    time_scale: float = 5000.0


@dataclass
class LifecycleResult:
    config: dict[str, Any]
    output_tokens: int = 0
    wall_s: float = 0.0
    store_bytes: int = 0
    store_bytes_max: int = 0
    ledger_bytes: int = 0
    archive_bytes: int = 0
    archived_rollouts: int = 0
    archive_events: int = 0
    archive_s: float = 0.0
    purged_events: int = 0
    purge_s: float = 0.0
    figures: dict[str, float] = field(default_factory=dict)


def _size(folder: Path, pattern: str) -> int:
    return sum(path.stat().st_size for path in folder.rglob(pattern) if path.is_file())


def _trace_task(name: str, tokens: int) -> dict[str, Any]:
    steps = [{"output_tokens": tokens, "tool_s": 1.0, "tool_output_tokens": 5},
             {"output_tokens": tokens // 2, "tool_s": 0.0, "tool_output_tokens": 0}]  # fmt: skip
    return {"id": name, "group": name, "prompt_tokens": 16, "steps": steps}


async def run_lifecycle(config: LifecycleConfig, folder: Path) -> LifecycleResult:
    result = LifecycleResult(config=asdict(config))
    compact = f"sync_interval: {COMPACT_EVERY_S}"
    with EmbeddedNatsServer(folder / "nats", jetstream_options=compact) as server:
        settings = Settings(nats_url=server.url, data_dir=folder / "data")
        policy = RetentionPolicy(keep_rollouts=config.keep, archive_dir=folder / "archive")
        options = InProcessOptions(
            num_workers=2,
            engine_options={"time_scale": str(config.time_scale), "model": "qwen3-8b"},
            control_plane=ControlPlaneConfig(
                cost_model="qwen3-8b", predictor=PredictorConfig("oracle"), worker_timeout_s=60
            ),
        )
        started = time.perf_counter()
        deployment = InProcessDeployment(settings, options)
        async with deployment, HeddleClient(settings, trainer="bench") as client:
            for step in range(config.steps):
                await _step(client, step, config, result)
                if config.keep is not None and step % config.every == config.every - 1:
                    _count(result, await apply_retention(settings, policy))
                    await asyncio.sleep(2.0)  # the server compacts purged blocks every second
                size = _size(server.store_dir, "*.blk")
                result.store_bytes_max = max(result.store_bytes_max, size)
        result.wall_s = time.perf_counter() - started
        result.store_bytes = _size(server.store_dir, "*.blk")
        result.ledger_bytes = _size(settings.data_dir, "ledger.db*")
        result.archive_bytes = _size(folder / "archive", "*.parquet")
    result.figures = _figures(result, config)
    return result


async def _step(client: HeddleClient, step: int, config: LifecycleConfig,
                result: LifecycleResult) -> None:  # fmt: skip
    tasks = [_trace_task(f"s{step}g{g}", config.tokens) for g in range(2)]
    options = TaskOptions(group_size=2, max_steps=4, max_new_tokens=4 * config.tokens,
                          max_total_tokens=8 * config.tokens + 64)  # fmt: skip
    rollout_id = await client.submit(tasks, environment="trace", task_options=options)
    summary = await client.wait(rollout_id, timeout_s=600, poll_s=0.02)
    result.output_tokens += summary.output_tokens


def _count(result: LifecycleResult, report: RetentionReport) -> None:
    result.archived_rollouts += len(report.archived)
    result.archive_s += report.archive_s
    if report.purge is not None:
        result.purged_events += report.purge.num_events
        result.purge_s += report.purge.elapsed_s
        result.archive_events += report.purge.num_events


def _figures(result: LifecycleResult, config: LifecycleConfig) -> dict[str, float]:
    tokens, steps = max(1, result.output_tokens), max(1, config.steps)
    figures = {
        "store_bytes_per_output_token": result.store_bytes / tokens,
        "store_bytes_per_step": result.store_bytes / steps,
        "store_max_bytes_per_output_token": result.store_bytes_max / tokens,
        "ledger_bytes_per_step": result.ledger_bytes / steps,
    }
    if result.archive_s > 0:
        figures["archive_events_per_s"] = result.archive_events / result.archive_s
        figures["archive_mb_per_s"] = result.archive_bytes / result.archive_s / 1e6
    if result.purge_s > 0:
        figures["purge_events_per_s"] = result.purged_events / result.purge_s
    return figures


def bench_lifecycle(config: LifecycleConfig) -> LifecycleResult:
    with tempfile.TemporaryDirectory(prefix="heddle-bench-lifecycle-") as folder:
        return asyncio.run(run_lifecycle(config, Path(folder)))
