"""Replay sessions: one-rollout rebuilds, verification (and what it catches), trace export, and
the `heddle replay` / `heddle db` commands."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ledger.lifecycle import everything, rollout_events
from sqlalchemy import text
from typer.testing import CliRunner

from heddle.bus import Bus
from heddle.cli import app
from heddle.config import Settings
from heddle.controlplane.projector import catch_up
from heddle.errors import UserError
from heddle.events import Event, WorkerHeartbeat
from heddle.ledger import head_revision, open_ledger, queries
from heddle.replay import open_replay
from heddle.traces import read_trace


def everything_of(rollout_id: str) -> list[Event]:
    return list(rollout_events(rollout_id, num_trajectories=2))


async def _durables(bus: Bus) -> AsyncIterator[str]:
    """Durable consumers of the events stream (a replay must leave none behind)."""
    for info in await bus.js.consumers_info("HEDDLE_EVENTS"):
        if info.config.durable_name:
            yield info.config.durable_name


@pytest.fixture
def settings(nats_url: str, tmp_path: Path) -> Settings:
    return Settings(
        nats_url=nats_url,
        database_url=f"sqlite:///{tmp_path / 'live.db'}",
        data_dir=tmp_path / "data",
    )


async def publish_history(settings: Settings, *, project: bool = True) -> None:
    """Publish the lifecycle history and (unless ``project`` is False) project it into the
    live ledger, as the live projector would have."""
    async with Bus(settings) as bus:
        await bus.publish_many(everything())
        # A worker named like a rollout: the one-rollout filter must not take its events.
        await bus.publish(
            WorkerHeartbeat(event_id="r1:hb", occurred_at=1.0, worker_id="r1", sequence=1)
        )
        if project:
            live = open_ledger(settings.ledger_url)
            await catch_up(bus, live)
            live.close()


async def test_verify_after_catch_up_is_consistent(settings: Settings) -> None:
    await publish_history(settings)
    async with open_replay(settings, live=True) as session:
        report = await session.verify()
    assert report.consistent and report.mismatches == []
    assert report.events == len(everything()) + 1
    assert report.sequence == report.events and report.unprojected_messages == 0
    assert report.rows_compared["steps"] == 3 * 2 + 2 * 3


async def test_verify_compares_as_of_the_live_position_and_writes_nothing(
    settings: Settings,
) -> None:
    """Events the live projector has not reached are left out of both sides; the live ledger
    and its position stay untouched (no catch-up, no durable)."""
    await publish_history(settings)
    async with Bus(settings) as bus:
        await bus.publish_many(everything_of("late"))
        before = open_ledger(settings.ledger_url)
        [position] = queries.positions(before)
        async with open_replay(settings, live=True) as session:
            report = await session.verify()
        assert queries.positions(before) == [position]
        assert queries.rollout_totals(before, "late") is None
        before.close()
        assert [c async for c in _durables(bus)] == []
    assert report.consistent, report.mismatches
    assert report.sequence == position.stream_sequence
    assert report.unprojected_messages == len(everything_of("late"))


async def test_one_rollout_replay(settings: Settings) -> None:
    await publish_history(settings)
    async with open_replay(settings, "r1", live=True) as session:
        report = await session.verify()
        summary = queries.rollout_totals(session.ledger, "r1")
        assert queries.rollout_totals(session.ledger, "r2") is None
        assert queries.workers(session.ledger) == []
    assert report.consistent, report.mismatches
    assert summary is not None and summary.num_trajectories == 3
    assert "workers" not in report.rows_compared


async def test_verify_reports_differences(settings: Settings) -> None:
    await publish_history(settings)
    live = open_ledger(settings.ledger_url)
    with live.engine.begin() as connection:
        connection.execute(text("UPDATE steps SET decode_s = 9.0 WHERE traj_id = 't000000'"))
        connection.execute(text("DELETE FROM trajectories WHERE traj_id = 't000002'"))
        connection.execute(text("DELETE FROM workers WHERE worker_id = 'w02'"))
    live.close()
    async with open_replay(settings, live=True) as session:
        report = await session.verify()
    assert not report.consistent
    assert report.num_mismatches == 4 + 2 + 1
    text_of_mismatches = "\n".join(report.mismatches)
    assert "steps (r1, t000000, 0): decode_s live=9.0 replay=1.5" in text_of_mismatches
    assert "trajectories (r2, t000002): missing from the live ledger" not in text_of_mismatches
    assert "trajectories (r1, t000002): missing from the live ledger" in text_of_mismatches
    assert "workers (w02): missing from the live ledger" in text_of_mismatches


async def test_trace_export(settings: Settings, tmp_path: Path) -> None:
    await publish_history(settings, project=False)
    path = tmp_path / "r1.jsonl"
    async with open_replay(settings, "r1") as session:
        assert session.export_trace(path) == 3
    first, migrated, failed = read_trace(path)
    assert (first.id, first.group, first.prompt_tokens) == ("t000000", "g0", 10)
    assert [(s.output_tokens, s.tool_s, s.tool_output_tokens) for s in first.steps] == [
        (32, 1.5, 5),
        (32, 0.0, 0),
    ]
    assert migrated.prompt_tokens == 11 and len(failed.steps) == 2


def _cli(settings: Settings, *args: str) -> tuple[int, str]:
    assert settings.nats_url is not None and settings.database_url is not None
    root = [
        "--nats-url",
        settings.nats_url,
        "--database-url",
        settings.database_url,
        "--data-dir",
        str(settings.data_dir),
    ]
    result = CliRunner().invoke(app, [*root, *args])
    return result.exit_code, result.stdout


def test_replay_command(settings: Settings, tmp_path: Path) -> None:
    """A synchronous test: the command runs its own event loop."""
    asyncio.run(publish_history(settings))
    code, out = _cli(settings, "replay", "--verify", "--json")
    report = json.loads(out)
    assert code == 0 and report["consistent"] is True and report["mismatches"] == []
    assert report["events"] == len(everything()) + 1
    trace = tmp_path / "t.jsonl"
    code, out = _cli(settings, "replay", "r2", "--export-trace", str(trace), "--json")
    assert code == 0 and json.loads(out)["trace"] == {"path": str(trace), "trajectories": 2}
    live = open_ledger(settings.ledger_url)
    with live.engine.begin() as connection:
        connection.execute(text("UPDATE rollouts SET policy = 'tampered'"))
    live.close()
    code, out = _cli(settings, "replay", "--verify", "--json")
    assert code == 1 and json.loads(out)["consistent"] is False
    bad = CliRunner().invoke(app, ["replay", "bad.id"])
    assert isinstance(bad.exception, UserError) and "not a valid id" in str(bad.exception)


def test_db_commands(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ops.db'}"
    runner = CliRunner()
    first = runner.invoke(app, ["--database-url", url, "db", "upgrade"])
    again = runner.invoke(app, ["--database-url", url, "db", "upgrade"])
    revision = runner.invoke(app, ["--database-url", url, "db", "revision"])
    assert first.exit_code == 0 and "upgraded from an empty database" in first.stdout
    assert "already at revision" in again.stdout
    assert f"current: {head_revision()}; latest: {head_revision()}" in revision.stdout
