"""Streams written before the compact array form (token ids and logprobs as plain JSON lists)
still replay: the fixture holds such events exactly as the old encoder wrote them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from heddle.bus import Bus
from heddle.config import Settings
from heddle.controlplane.projector import catch_up
from heddle.ledger import open_ledger, queries
from heddle.replay import open_replay
from heddle.traces import read_trace

FIXTURE = Path(__file__).parent / "fixtures" / "old_form_events.jsonl"


@pytest.fixture
def settings(nats_url: str, tmp_path: Path) -> Settings:
    return Settings(
        nats_url=nats_url,
        database_url=f"sqlite:///{tmp_path / 'live.db'}",
        data_dir=tmp_path / "data",
    )


async def publish_old_form(settings: Settings) -> int:
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    async with Bus(settings) as bus:
        for line in lines:
            payload = json.dumps(line["payload"], separators=(",", ":")).encode()
            assert b'"enc"' not in payload
            await bus.publish_raw(line["subject"], payload, line["payload"]["event_id"])
    return len(lines)


async def project_live_ledger(settings: Settings) -> None:
    ledger = open_ledger(settings.ledger_url)
    try:
        async with Bus(settings) as bus:
            await catch_up(bus, ledger)
    finally:
        ledger.close()


async def test_an_old_form_stream_replays_and_verifies(settings: Settings, tmp_path: Path) -> None:
    num_events = await publish_old_form(settings)
    await project_live_ledger(settings)
    async with open_replay(settings, live=True) as session:
        report = await session.verify()
        steps = queries.steps(session.ledger, "r1", "t000000")
    assert report.consistent, report.mismatches
    # Its two failures name no worker (written before ``Failed.worker_id``) on a worker's
    # subject: refused as on the wrong one (only the control plane's failure names none, on
    # its own subject), as the gate refused them before (their trajectories had holders).
    assert report.events == num_events and report.skipped_messages == 2
    assert [(s.num_output_tokens, s.num_input_tokens) for s in steps] == [(32, 0), (32, 5)]
    path = tmp_path / "r1.jsonl"
    async with open_replay(settings, "r1") as session:
        assert session.export_trace(path) == 3
    first = read_trace(path)[0]
    assert first.prompt_tokens == 10
    assert [(s.output_tokens, s.tool_output_tokens) for s in first.steps] == [(32, 5), (32, 0)]
