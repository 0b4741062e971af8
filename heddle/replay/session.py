"""A replay session: the stream rebuilt into a fresh temporary ledger, ready for analysis.

    async with open_replay(settings, rollout_id, catch_up_live=True) as session:
        report = session.verify()                 # compare with the live ledger
        session.export_trace(Path("trace.jsonl"))  # the DESIGN.md trace format
        ...                                       # timelines, what-if runs read session.ledger

With ``catch_up_live`` the live ledger's durable projector first projects whatever it has not
yet, and the rebuild stops at the same stream sequence, so events published meanwhile cannot
make the two differ.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from heddle.bus import Bus
from heddle.config import Settings
from heddle.ledger import Ledger, catch_up, open_ledger
from heddle.ledger.compare import compare_ledgers
from heddle.replay.rebuild import RebuildStats, rebuild_ledger
from heddle.replay.trace_export import export_trace


@dataclass(frozen=True, slots=True)
class VerifyReport:
    events: int
    """Events replayed from the stream."""
    consistent: bool
    mismatches: list[str]
    """Readable differences (the first 50)."""
    num_mismatches: int
    rows_compared: dict[str, int]
    caught_up_events: int
    """Events the live projector had not projected yet (projected before comparing)."""
    skipped_messages: int
    """Undecodable messages in the stream (dead-lettered, so absent from both ledgers)."""


@dataclass(frozen=True, slots=True)
class ReplaySession:
    ledger: Ledger
    """The fresh ledger rebuilt from the stream."""
    stats: RebuildStats
    rollout_id: str | None
    live: Ledger | None
    """The live ledger, caught up (with ``catch_up_live``)."""
    caught_up_events: int
    bus: Bus | None = None
    """The connection the session read the stream with, open as long as the session is (for
    analyses that read the stream again: timelines, what-if runs)."""

    def verify(self) -> VerifyReport:
        """Compare the live ledger with the rebuilt one, table by table."""
        if self.live is None:
            raise ValueError("verify needs a session opened with catch_up_live=True")
        comparison = compare_ledgers(self.live, self.ledger, rollout_id=self.rollout_id)
        return VerifyReport(
            events=self.stats.num_events,
            consistent=comparison.is_consistent,
            mismatches=comparison.mismatches,
            num_mismatches=comparison.num_mismatches,
            rows_compared=comparison.num_rows,
            caught_up_events=self.caught_up_events,
            skipped_messages=self.stats.num_skipped,
        )

    def export_trace(self, path: Path) -> int:
        """Write the replayed trajectories as a JSONL trace; returns how many."""
        return export_trace(self.ledger, path, self.rollout_id)


@contextlib.asynccontextmanager
async def open_replay(
    settings: Settings, rollout_id: str | None = None, *, catch_up_live: bool = False
) -> AsyncIterator[ReplaySession]:
    live = (
        await asyncio.to_thread(open_ledger, settings.ledger_url, auto_upgrade=True)
        if catch_up_live
        else None
    )
    try:
        async with Bus(settings) as bus:
            num_caught_up, end_sequence = 0, None
            if live is not None:
                caught_up = await catch_up(bus, live)
                num_caught_up, end_sequence = caught_up.num_projected, caught_up.position
            with tempfile.TemporaryDirectory(prefix="heddle-replay-") as folder:
                fresh = await asyncio.to_thread(
                    open_ledger, f"sqlite:///{Path(folder) / 'replay.db'}"
                )
                try:
                    stats = await rebuild_ledger(bus, fresh, rollout_id, end_sequence=end_sequence)
                    yield ReplaySession(fresh, stats, rollout_id, live, num_caught_up, bus)
                finally:
                    fresh.close()
    finally:
        if live is not None:
            live.close()
