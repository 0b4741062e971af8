"""A damaged ledger (its last page overwritten, as a torn write or a bad disk leaves it), with a
real nats-server and real SQLite: the projector's keeper sets the file aside and rebuilds the
ledger from the stream, or stops with the reason where a rebuild cannot be whole; ``heddle
status`` says which, and ``heddle replay --verify`` gives a verdict either way."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner
from waiting import until

from heddle.bus import Bus
from heddle.bus.snapshots import Snapshot, store_snapshot
from heddle.cli.apps import app
from heddle.config import Settings
from heddle.controlplane.ledger_health import read_health
from heddle.controlplane.ledger_recovery import LedgerKeeper, ProjectionStopped
from heddle.controlplane.projector import ProjectorConfig, catch_up
from heddle.events.subjects import EVENTS_STREAM
from heddle.ledger import open_ledger
from heddle.ledger.compare import compare_ledgers
from heddle.ledger.integrity import FileIdentity, set_aside_once
from heddle.ledger.snapshot_store import sqlite_bytes
from heddle.replay import rebuild_ledger
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions

from .lifecycle import everything, rollout_events

CONFIG = ProjectorConfig(batch_size=64, fetch_wait_s=0.2)
PAGE_BYTES = 4096


@pytest.fixture
def settings(nats_url: str, tmp_path: Path) -> Settings:
    return Settings(nats_url=nats_url, data_dir=tmp_path / "data")


@pytest.fixture
async def bus(settings: Settings) -> AsyncIterator[Bus]:
    async with Bus(settings) as connected:
        yield connected


async def projected_then_damaged(bus: Bus, settings: Settings) -> Path:
    """The stream's events projected into the data dir's SQLite ledger, whose last page is then
    overwritten with noise; more events arrive after."""
    await bus.publish_many(everything())
    ledger = open_ledger(settings.ledger_url)
    await catch_up(bus, ledger, CONFIG)
    ledger.close()  # checkpoints the WAL into the file
    path = settings.embedded_ledger_path
    noise = random.Random(7).randbytes(PAGE_BYTES)
    with path.open("r+b") as handle:
        handle.seek(path.stat().st_size - PAGE_BYTES)
        handle.write(noise)
    await bus.publish_many(rollout_events("r9", num_trajectories=2))
    return path


async def test_a_damaged_ledger_is_set_aside_and_rebuilt_from_the_stream(
    bus: Bus, settings: Settings, tmp_path: Path
) -> None:
    path = await projected_then_damaged(bus, settings)
    keeper = LedgerKeeper(bus, settings, open_ledger(settings.ledger_url), CONFIG)
    stats = await keeper.run(until_idle=True)
    rebuilt = keeper.ledger
    reference = open_ledger(f"sqlite:///{tmp_path / 'reference.db'}")
    try:
        await rebuild_ledger(bus, reference)
        assert compare_ledgers(rebuilt, reference).mismatches == []
    finally:
        reference.close()
        rebuilt.close()
    last = (await bus.stream_state()).last_sequence
    assert stats.position == last
    [copy] = path.parent.glob("ledger.db.corrupt-*[0-9]")
    health = read_health(settings.data_dir)
    assert health is not None and health.state == "ok", health
    assert health.corrupt_copy == str(copy) and health.target_sequence == last
    assert health.reason  # the database's words (malformed image, or quick_check's findings)


async def test_a_ledger_the_stream_cannot_rebuild_stops_with_the_reason(
    bus: Bus, settings: Settings
) -> None:
    path = await projected_then_damaged(bus, settings)
    await bus.js.delete_msg(EVENTS_STREAM, 1)  # as retention or a purge would
    keeper = LedgerKeeper(bus, settings, open_ledger(settings.ledger_url), CONFIG)
    with pytest.raises(ProjectionStopped, match=r"no longer holds events #1\.\.#1"):
        await keeper.run(until_idle=True)
    keeper.ledger.close()
    assert path.exists() and not list(path.parent.glob("ledger.db.corrupt-*"))
    health = read_health(settings.data_dir)
    assert health is not None and health.state == "stopped"
    status = CliRunner().invoke(app, ["--data-dir", str(settings.data_dir), "status", "--no-nats"])
    said = " ".join(status.output.split())
    assert "ledger projection STOPPED" in said and "no longer holds events" in said, said


async def test_replay_verify_gives_a_verdict_on_a_damaged_ledger(
    bus: Bus, settings: Settings, nats_url: str
) -> None:
    await projected_then_damaged(bus, settings)
    command = ["--nats-url", nats_url, "--data-dir", str(settings.data_dir), "replay", "--verify"]
    result = await asyncio.to_thread(CliRunner().invoke, app, [*command, "--json"])
    assert result.exit_code == 1, result.output
    verdict = json.loads(result.stdout)
    assert verdict["consistent"] is False
    assert "is corrupt" in verdict["error"]
    table = await asyncio.to_thread(CliRunner().invoke, app, command)
    assert table.exit_code == 1 and "not consistent" in table.output


def test_processes_sharing_a_damaged_file_set_it_aside_once(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    path.write_bytes(b"damaged")
    opened = FileIdentity.of(path)
    first = set_aside_once(path, opened)
    path.write_bytes(b"the fresh ledger another process made")
    assert first is not None and first.read_bytes() == b"damaged"
    assert set_aside_once(path, opened) is None, "the fresh file is not the damaged one"
    assert path.read_bytes() == b"the fresh ledger another process made"


async def test_a_control_plane_rebuilds_a_damaged_ledger_and_status_says_so(
    bus: Bus, settings: Settings
) -> None:
    path = await projected_then_damaged(bus, settings)
    options = InProcessOptions(num_workers=0)
    async with InProcessDeployment(settings, options):
        await until(lambda: _health_state(settings) == "ok", "the ledger rebuilt", 120)
    [copy] = path.parent.glob("ledger.db.corrupt-*[0-9]")
    command = ["--data-dir", str(settings.data_dir), "status", "--no-nats"]
    status = await asyncio.to_thread(CliRunner().invoke, app, command)
    said = " ".join(status.output.split())
    assert status.exit_code == 0, status.output
    assert "ledger rebuilt from the stream" in said and str(copy) in said.replace(" ", "")


def _health_state(settings: Settings) -> str:
    health = read_health(settings.data_dir)
    return health.state if health is not None else ""


async def test_a_damaged_ledger_of_a_purged_stream_is_rebuilt_from_its_snapshot(
    bus: Bus, settings: Settings, tmp_path: Path
) -> None:
    """Old rollouts purged after a ledger snapshot (``heddle purge``): the rebuild restores the
    snapshot and projects the events after it, matching the ledger kept whole beside it."""
    await bus.publish_many(everything())
    ledger = open_ledger(settings.ledger_url)
    await catch_up(bus, ledger, CONFIG)
    sequence = (await bus.stream_state()).last_sequence
    await store_snapshot(bus, Snapshot(sequence, sqlite_bytes(ledger)))
    ledger.close()
    kept = tmp_path / "kept.db"
    shutil.copy(settings.embedded_ledger_path, kept)
    await bus.js.purge_stream(EVENTS_STREAM, seq=sequence + 1)  # events up to the snapshot
    path = settings.embedded_ledger_path
    with path.open("r+b") as handle:
        handle.seek(path.stat().st_size - PAGE_BYTES)
        handle.write(random.Random(8).randbytes(PAGE_BYTES))
    await bus.publish_many(rollout_events("r9", num_trajectories=2))
    keeper = LedgerKeeper(bus, settings, open_ledger(settings.ledger_url), CONFIG)
    await keeper.run(until_idle=True)
    reference = open_ledger(f"sqlite:///{kept}")
    try:
        await catch_up(bus, reference, CONFIG)
        assert compare_ledgers(keeper.ledger, reference).mismatches == []
    finally:
        reference.close()
        keeper.ledger.close()
    health = read_health(settings.data_dir)
    assert health is not None and health.state == "ok", health
