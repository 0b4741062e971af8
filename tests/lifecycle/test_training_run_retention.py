"""A 200-step training run that does not fill the disk: one rollout a step (sim engine, time
scale 5000, four trajectories of 1,500 + 750 generated tokens), retention "keep the last 5"
applied every 20 steps (archive, then purge), as ``heddle up --retention-every-s`` would.

- The JetStream store stays under ``STORE_BOUND`` after each purge once the server compacted
  its blocks (this server compacts every second; a stock one every 2 minutes), where the same
  run without retention writes ~28 MB (docs/benchmarks.md, "A training run's disk").
- ``heddle replay --verify`` is consistent after every purge (it starts from the snapshot).
- Every archived completion reads back equal to the stream's ``Completed`` before the purge.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from waiting import until

from heddle.bus import Bus, ReplayQuery
from heddle.bus.server import EmbeddedNatsServer
from heddle.client import HeddleClient
from heddle.config import RetentionPolicy, Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import Completed
from heddle.events.subjects import trajectory_subjects
from heddle.ledger import RolloutStatus, open_ledger, queries
from heddle.lifecycle.archive import read_completions, verify_archive
from heddle.lifecycle.purge import num_events
from heddle.lifecycle.retention import apply_retention
from heddle.replay import open_replay
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.rollout.submission import TaskOptions

from .conftest import trace_task

pytestmark = pytest.mark.timeout(600)

STEPS, KEEP, EVERY, TOKENS = 200, 5, 20, 1500
STORE_BOUND = 16 * 2**20
"""The JetStream store's bound: the live events of at most KEEP + EVERY rollouts (~1.3 MB),
the stream's current 8 MiB block (never compacted while it is written), compacted older blocks
and the commands stream."""


def store_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*.blk"))


async def completed_events(bus: Bus, rollout_id: str) -> list[Completed]:
    query = ReplayQuery(
        filter_subjects=trajectory_subjects(rollout_id, "*", "completed"), start_sequence=1
    )
    events = [r.message async for r in bus.replay_events(query) if isinstance(r.message, Completed)]
    return sorted([await bus.resolve(e) for e in events], key=lambda c: c.index)


def ledger_status(settings: Settings, rollout_id: str) -> RolloutStatus | None:
    ledger = open_ledger(settings.ledger_url)
    try:
        return {row.rollout_id: row.status for row in queries.rollouts(ledger)}.get(rollout_id)
    finally:
        ledger.close()


async def ledger_shows_ended(settings: Settings, rollout_id: str) -> None:
    """Until the projector has written ``rollout_id`` as ended: retention reads the ledger,
    which may lag the stream that ``client.wait`` reads (then it keeps one rollout more)."""

    async def ended() -> bool:
        status = await asyncio.to_thread(ledger_status, settings, rollout_id)
        return status in {RolloutStatus.FINISHED, RolloutStatus.CANCELLED}

    await until(ended, f"the ledger shows {rollout_id} ended")


@pytest.fixture
def server(tmp_path: Path) -> AsyncIterator[EmbeddedNatsServer]:
    compact = "sync_interval: 1s"  # compact purged blocks every second
    with EmbeddedNatsServer(tmp_path / "nats", jetstream_options=compact) as nats_server:
        yield nats_server


async def test_200_steps_with_retention_stay_bounded_and_replayable(
    server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    settings = Settings(nats_url=server.url, data_dir=tmp_path / "data")
    policy = RetentionPolicy(keep_rollouts=KEEP, archive_dir=tmp_path / "archive")
    options = InProcessOptions(
        num_workers=2,
        engine_options={"time_scale": "5000", "model": "qwen3-8b"},
        control_plane=ControlPlaneConfig(
            cost_model="qwen3-8b", predictor=PredictorConfig("oracle"), worker_timeout_s=60.0
        ),
    )
    task_options = TaskOptions(group_size=2, max_steps=4, max_new_tokens=4096,
                               max_total_tokens=16384)  # fmt: skip
    seen: dict[str, list[Completed]] = {}
    purged: list[str] = []
    deployment = InProcessDeployment(settings, options)
    async with deployment, HeddleClient(settings, trainer="t") as client:
        for step in range(STEPS):
            tasks = [trace_task(f"s{step}g{g}", [TOKENS, TOKENS // 2]) for g in range(2)]
            rollout_id = await client.submit(tasks, environment="trace", task_options=task_options)
            await client.wait(rollout_id, timeout_s=120, poll_s=0.02)
            seen[rollout_id] = await completed_events(client.bus, rollout_id)
            if step % EVERY != EVERY - 1:
                continue
            await ledger_shows_ended(settings, rollout_id)
            report = await apply_retention(settings, policy)
            assert report.purge is not None
            purged += report.purge.rollout_ids
            assert len(seen) - len(purged) == KEEP  # the last 5 stay
            for rollout_id in report.purge.rollout_ids:
                assert await num_events(client.bus, rollout_id) == 0
            async with open_replay(settings, live=True) as session:
                verified = await session.verify()
            assert verified.consistent, verified.mismatches
            assert session.from_snapshot == report.purge.snapshot_sequence
            await until(lambda: store_bytes(server.store_dir) <= STORE_BOUND,
                        f"the JetStream store under {STORE_BOUND} bytes", poll_s=0.2)  # fmt: skip
    assert len(purged) == STEPS - KEEP
    for rollout_id in purged:
        verify_archive(policy.archive_dir / rollout_id)
        assert read_completions(policy.archive_dir / rollout_id) == seen[rollout_id]
