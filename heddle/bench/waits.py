"""Waits the chaos and cluster benchmarks share: a rollout's end in the stream, and the ledger
projector's position reaching it."""

from __future__ import annotations

import asyncio
import time

from heddle.bus import Bus, ReplayQuery
from heddle.config import Settings
from heddle.events import RolloutFinished
from heddle.events.subjects import rollout_subject
from heddle.ledger import LEDGER_CONSUMER, queries
from heddle.ledger.snapshot import open_read_only

POLL_S = 0.2


async def wait_finished(bus: Bus, rollout_id: str, timeout_s: float) -> int:
    """The stream sequence of the rollout's ``RolloutFinished`` (waits for it)."""
    deadline = time.monotonic() + timeout_s
    query = ReplayQuery((rollout_subject(rollout_id, "finished"),))
    while time.monotonic() < deadline:
        async for record in bus.replay_events(query):
            if isinstance(record.message, RolloutFinished):
                return record.stream_sequence
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"rollout {rollout_id} did not finish within {timeout_s:g} s")


async def wait_projected(settings: Settings, sequence: int, timeout_s: float) -> None:
    """Return once the ledger projector's position reaches ``sequence``."""
    deadline = time.monotonic() + timeout_s
    ledger = await asyncio.to_thread(open_read_only, settings.ledger_url)
    try:
        while time.monotonic() < deadline:
            positions = {p.consumer: p.stream_sequence for p in queries.positions(ledger)}
            if positions.get(LEDGER_CONSUMER, 0) >= sequence:
                return
            await asyncio.sleep(POLL_S)
    finally:
        ledger.close()
    raise TimeoutError(f"the projector did not reach #{sequence} within {timeout_s:g} s")
