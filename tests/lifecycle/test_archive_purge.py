"""`heddle archive` and `heddle purge` on a live deployment: a finished rollout's archive holds
every event as stored, its offloaded arrays, and the completions exactly as the trainer got them
(Hugging Face ``datasets`` reads it); purge refuses a running or unarchived rollout and removes
nothing then; a purged rollout is out of the stream and the object store, ``replay --verify``
still matches (from the snapshot), and a new control plane on an empty ledger restores the
snapshot and ends with the same ledger, then runs a new rollout."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from heddle.bus import PAYLOADS_BUCKET, Bus
from heddle.bus.purge import bucket_names, count_messages
from heddle.bus.snapshots import latest_snapshot
from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.controlplane.plane_config import HostConfig
from heddle.ledger import open_ledger, queries
from heddle.ledger.compare import compare_ledgers
from heddle.lifecycle.archive import archive_rollout, read_completions, verify_archive
from heddle.lifecycle.purge import PurgeRefused, num_events, purge_rollouts
from heddle.replay import open_replay
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions

from .conftest import TIME_SCALE, run_step, trace_task

pytestmark = pytest.mark.timeout(300)


async def test_archive_then_purge_keeps_replay_and_a_new_control_plane_whole(
    heddle: InProcessDeployment, settings: Settings, tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    async with HeddleClient(settings, trainer="t") as client:
        first, got = await run_step(client, 0)
        second, _ = await run_step(client, 1)
        manifest = await archive_rollout(client.bus, first, archive)
        assert manifest.num_completions == 4 and manifest.num_payloads > 0
        assert [c.response_token_ids for c in read_completions(archive / first)] == [
            c.response_token_ids for c in got
        ]
        assert read_completions(archive / first) == got  # every field, as the trainer got it
        assert_datasets_reads(archive / first, got)
        held = await client.submit(
            [trace_task("long", [200_000])], environment="trace",
        )  # fmt: skip
        with pytest.raises(PurgeRefused, match="still running"):
            await purge_rollouts(settings, [held], archive)
        with pytest.raises(PurgeRefused, match="not archived"):
            await purge_rollouts(settings, [second], archive)
        assert await num_events(client.bus, second) > 0
        await client.cancel(held)
        out = "HEDDLE_OUT_t"  # trainer t's delivery stream: 4 records and the end per rollout
        assert await count_messages(client.bus, out, f"heddle.out.t.{first}.>") == 5
        report = await purge_rollouts(settings, [first], archive)
        assert await count_messages(client.bus, out, f"heddle.out.t.{first}.>") == 0
        assert await count_messages(client.bus, out, f"heddle.out.t.{second}.>") == 5
        assert report.rollout_ids == [first] and report.num_events == manifest.num_events
        assert await num_events(client.bus, first) == 0
        assert await bucket_names(client.bus, PAYLOADS_BUCKET, f"{first}/") == []
        verify_archive(archive / first)
    async with open_replay(settings, live=True) as session:
        verified = await session.verify()
    assert verified.consistent, verified.mismatches
    assert session.from_snapshot == report.snapshot_sequence > 0
    ledger = open_ledger(settings.ledger_url)
    assert queries.rollout_totals(ledger, first) is not None  # the ledger keeps its rows
    ledger.close()


async def test_a_new_control_plane_starts_from_the_snapshot(nats_url: str, tmp_path: Path) -> None:
    settings = Settings(nats_url=nats_url, data_dir=tmp_path / "old", max_event_bytes=2048)
    archive = tmp_path / "archive"
    async with _deployment(settings), HeddleClient(settings, trainer="t") as client:
        ids = [(await run_step(client, step))[0] for step in range(3)]
        for rollout_id in ids[:2]:
            await archive_rollout(client.bus, rollout_id, archive)
        await purge_rollouts(settings, ids[:2], archive)
    fresh = Settings(nats_url=nats_url, data_dir=tmp_path / "new", max_event_bytes=2048)
    async with _deployment(fresh, prefix="second"), HeddleClient(fresh, trainer="t") as client:
        await run_step(client, 9)
        await asyncio.sleep(1.0)
    old, new = open_ledger(settings.ledger_url), open_ledger(fresh.ledger_url)
    try:
        new_rows = {r.rollout_id for r in queries.rollouts(new)}
        assert set(ids) <= new_rows and len(new_rows) == 4
        assert compare_ledgers(old, new, rollout_id=ids[0]).is_consistent
    finally:
        old.close()
        new.close()
    async with Bus(fresh) as bus:
        assert (await latest_snapshot(bus)) is not None


def assert_datasets_reads(folder: Path, got: list) -> None:
    """Hugging Face ``datasets`` reads the archive as trainers read Parquet."""
    from datasets import load_dataset

    def load(name: str) -> Any:
        files = str(folder / f"{name}.parquet")
        return load_dataset("parquet", data_files=files, cache_dir=str(folder.parent / ".hf"))

    rows = load("completions")["train"]
    assert rows["traj_id"] == [c.traj_id for c in got]
    assert rows[0]["response_token_ids"] == list(got[0].response_token_ids)
    assert rows[0]["loss_mask"] == list(got[0].loss_mask)
    kinds = set(load("events")["train"]["kind"])
    assert {"rollout.submitted", "traj.completed", "rollout.finished"} <= kinds


def _deployment(settings: Settings, prefix: str = "control") -> InProcessDeployment:
    options = InProcessOptions(
        num_workers=2,
        engine_options={"time_scale": str(TIME_SCALE), "model": "qwen3-8b"},
        control_plane=ControlPlaneConfig(
            cost_model="qwen3-8b",
            predictor=PredictorConfig("oracle"),
            host=HostConfig(durable_prefix=prefix),
        ),
    )
    return InProcessDeployment(settings, options)
