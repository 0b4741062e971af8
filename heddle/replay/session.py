"""A replay session: the stream rebuilt into a fresh temporary ledger, ready for analysis.

    async with open_replay(settings, rollout_id, live=True) as session:
        report = await session.verify()           # compare with the live ledger
        session.export_trace(Path("trace.jsonl"))  # the docs/design.md trace format
        ...                                       # timelines, what-if runs read session.ledger

A replay never writes the live ledger or its position, so it runs beside a live system. To
verify, it reads the live ledger inside one snapshot transaction (``heddle.ledger.snapshot``):
the projector commits rows and position together, so the snapshot is the live ledger as of its
position S. The scratch ledger is rebuilt up to exactly S (most of it before the snapshot is
taken, the rest while it is held) and the two are compared; the report names S. Events the live
projector has not reached yet are left out of both (``unprojected_messages``).

When old rollouts were purged from the stream (``heddle purge``), the rebuild starts from the
latest ledger snapshot (``heddle.bus.snapshots``: the ledger as of sequence ``from_snapshot``,
itself a rebuild that matched the live ledger when taken) and folds the events after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from heddle.bus import Bus
from heddle.bus.snapshots import latest_snapshot
from heddle.config import Settings
from heddle.ledger import LEDGER_CONSUMER, Ledger, open_ledger
from heddle.ledger.compare import compare_ledgers
from heddle.ledger.integrity import LedgerCorrupt, quick_check, reading
from heddle.ledger.snapshot import open_read_only, position_in, snapshot
from heddle.ledger.snapshot_store import seed_file
from heddle.replay.rebuild import REPLAY_CONSUMER, RebuildStats, rebuild_ledger
from heddle.replay.trace_export import export_trace


@dataclass(frozen=True, slots=True)
class VerifyReport:
    events: int
    """Events replayed from the stream (up to ``sequence``)."""
    consistent: bool
    mismatches: list[str]
    """Readable differences (the first 50)."""
    num_mismatches: int
    rows_compared: dict[str, int]
    sequence: int
    """S: the stream sequence both ledgers were compared as of (the live position then)."""
    unprojected_messages: int
    """Messages stored after S when the comparison ran (the live projector's lag)."""
    skipped_messages: int
    """Undecodable messages in the stream (dead-lettered, so absent from both ledgers)."""
    error: str = ""
    """Why the live ledger could not be compared (it is damaged: not consistent then)."""


@dataclass(frozen=True, slots=True)
class ReplaySession:
    ledger: Ledger
    """The fresh ledger rebuilt from the stream."""
    stats: RebuildStats
    rollout_id: str | None
    live: Ledger | None
    """The live ledger, read-only (with ``live=True``)."""
    bus: Bus | None = None
    """The connection the session read the stream with, open as long as the session is (for
    analyses that read the stream again: timelines, what-if runs)."""
    live_consumer: str = LEDGER_CONSUMER
    from_snapshot: int = 0
    """The sequence of the ledger snapshot the rebuild started from (0: the stream's start)."""
    live_error: str = ""
    """Why the live ledger could not be opened or positioned (damaged), if so."""

    async def verify(self) -> VerifyReport:
        """Compare the live ledger, as of its position S, with the rebuild up to S. A damaged
        live ledger is a verdict too: not consistent, with the database's words."""
        if self.bus is None or (self.live is None and not self.live_error):
            raise ValueError("verify needs a session opened with live=True")
        if self.live is None:
            return await self._unreadable(self.live_error)
        damage = await asyncio.to_thread(quick_check, self.live)
        if damage is not None:  # pages no comparison reads (an index) are damaged too
            return await self._unreadable(str(LedgerCorrupt(self.live.url, damage)))
        try:
            with reading(self.live.url), snapshot(self.live) as live_view:
                sequence = position_in(live_view, self.live_consumer)
                more = await rebuild_ledger(
                    self.bus, self.ledger, self.rollout_id, end_sequence=sequence
                )
                comparison = await asyncio.to_thread(
                    compare_ledgers, live_view, self.ledger, rollout_id=self.rollout_id
                )
        except LedgerCorrupt as exc:
            return await self._unreadable(str(exc))
        last = (await self.bus.stream_state()).last_sequence
        return VerifyReport(
            events=self.stats.num_events + more.num_events,
            consistent=comparison.is_consistent,
            mismatches=comparison.mismatches,
            num_mismatches=comparison.num_mismatches,
            rows_compared=comparison.num_rows,
            sequence=sequence,
            unprojected_messages=max(0, last - sequence),
            skipped_messages=self.stats.num_skipped + more.num_skipped,
        )

    async def _unreadable(self, reason: str) -> VerifyReport:
        assert self.bus is not None
        last = (await self.bus.stream_state()).last_sequence
        return VerifyReport(
            events=self.stats.num_events,
            consistent=False,
            mismatches=[reason],
            num_mismatches=1,
            rows_compared={},
            sequence=0,
            unprojected_messages=last,
            skipped_messages=self.stats.num_skipped,
            error=reason,
        )

    def export_trace(self, path: Path) -> int:
        """Write the replayed trajectories as a JSONL trace; returns how many."""
        return export_trace(self.ledger, path, self.rollout_id)


@contextlib.asynccontextmanager
async def open_replay(
    settings: Settings, rollout_id: str | None = None, *, live: bool = False
) -> AsyncIterator[ReplaySession]:
    """Rebuild the stream (or one rollout) into a scratch ledger. With ``live``, the rebuild
    stops at the live ledger's current position, ready for ``verify()``."""
    live_ledger, end_sequence, live_error = None, None, ""
    if live:
        live_ledger, end_sequence, live_error = await asyncio.to_thread(
            _open_live, settings.ledger_url
        )
    try:
        async with Bus(settings) as bus:
            with tempfile.TemporaryDirectory(prefix="heddle-replay-") as folder:
                path = Path(folder) / "replay.db"
                snapshot = await latest_snapshot(bus)
                if snapshot is not None:
                    seed_file(snapshot.sequence, snapshot.database, path, REPLAY_CONSUMER)
                fresh = await asyncio.to_thread(open_ledger, f"sqlite:///{path}")
                try:
                    stats = await rebuild_ledger(bus, fresh, rollout_id, end_sequence=end_sequence)
                    start = snapshot.sequence if snapshot is not None else 0
                    yield ReplaySession(fresh, stats, rollout_id, live_ledger, bus,
                                        from_snapshot=start, live_error=live_error)  # fmt: skip
                finally:
                    fresh.close()
    finally:
        if live_ledger is not None:
            live_ledger.close()


def _open_live(url: str) -> tuple[Ledger | None, int | None, str]:
    """The live ledger and its position; a damaged one is (None, None, why): the whole stream
    is then rebuilt and ``verify`` says why nothing was compared."""
    try:
        with reading(url):
            ledger = open_read_only(url)
    except LedgerCorrupt as exc:
        return None, None, str(exc)
    try:
        with reading(url):
            return ledger, _live_position(ledger), ""
    except LedgerCorrupt as exc:
        ledger.close()
        return None, None, str(exc)


def _live_position(ledger: Ledger) -> int:
    with snapshot(ledger) as connection:
        return position_in(connection, LEDGER_CONSUMER)
