"""The projector's keeper: a corrupt ledger is rebuilt from the stream, or projection stops with
an error that ``heddle status`` shows.

``LedgerKeeper(bus, settings, ledger).run()`` runs the ``Projector``; when it meets a damaged
database (``LedgerCorrupt``), the keeper

- rebuilds an embedded SQLite ledger: the damaged file is moved aside
  (``ledger.db.corrupt-<date>``, kept for inspection), a fresh ledger takes its place and is
  projected from the stream's first event (its durable recreated there), as the stream is the
  source of truth; once rollouts were purged, from the latest ledger snapshot
  (``heddle.ledger.snapshot_store``) and the events after it. Processes sharing the file move
  it once (``set_aside_once``);
- stops, with the reason, where a rebuild cannot be whole or is not ours to do: a PostgreSQL
  ledger (restore it from a backup, or point ``HEDDLE_DATABASE_URL`` at an empty database to
  rebuild it), or a stream that no longer holds the events after that snapshot (retention or
  a purge past it).

Damage the projector's writes have not met yet is looked for once at start, beside it
(``quick_check``). Either way the keeper says so in its log and in
``<data_dir>/ledger-health.json`` (``heddle.controlplane.ledger_health``: ``rebuilding`` until the
fresh ledger reaches the stream's last event as of the damage, then ``ok`` with what happened;
or ``stopped``), which ``heddle status`` prints. A stopped keeper raises ``ProjectionStopped``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import msgspec

from heddle.bus import Bus
from heddle.bus.snapshots import latest_snapshot
from heddle.config import Settings
from heddle.controlplane.ledger_health import LedgerHealth, health_path, read_health, write_health
from heddle.controlplane.projector import Projector, ProjectorConfig, ProjectorStats
from heddle.errors import UserError
from heddle.ledger import Ledger, open_ledger
from heddle.ledger.integrity import (
    FileIdentity,
    LedgerCorrupt,
    quick_check,
    set_aside_once,
    sqlite_file,
)
from heddle.ledger.snapshot_store import position as stored_position
from heddle.ledger.snapshot_store import restore

log = logging.getLogger(__name__)

_CAUGHT_UP_POLL_S = 1.0


class ProjectionStopped(UserError):
    """The ledger is damaged and cannot be rebuilt here (the message says what to do)."""


class LedgerKeeper:
    """Runs a projector on ``ledger`` and keeps it running across a damaged database."""

    def __init__(
        self,
        bus: Bus,
        settings: Settings,
        ledger: Ledger,
        config: ProjectorConfig | None = None,
        on_new_ledger: Callable[[Ledger], None] | None = None,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.ledger = ledger
        self.config = config or ProjectorConfig()
        self.on_new_ledger = on_new_ledger
        """Told the fresh ledger that replaced a damaged one (the owner closes the old)."""
        self.projector: Projector | None = None
        self._file = sqlite_file(ledger.url)
        self._opened = FileIdentity.of(self._file) if self._file is not None else None
        self._stop_requested = False
        self._found: LedgerCorrupt | None = None
        self._rebuilding: LedgerHealth | None = None
        self._reporter: asyncio.Task[None] | None = None

    def stop(self) -> None:
        self._stop_requested = True
        if self.projector is not None:
            self.projector.stop()

    async def run(self, *, until_idle: bool = False) -> ProjectorStats:
        """Project until stopped (or caught up, ``until_idle``); ``ProjectionStopped`` when a
        damaged ledger cannot be rebuilt."""
        self._resume_report()
        checking = asyncio.create_task(self._check(self.ledger))
        try:
            while True:
                projector = self.projector = Projector(self.bus, self.ledger, self.config)
                if self._stop_requested:
                    projector.stop()
                try:
                    stats = await projector.run(until_idle=until_idle)
                    if until_idle and not self._stop_requested:
                        await checking
                except LedgerCorrupt as damage:
                    await self._replace(damage)
                    continue
                found, self._found = self._found, None
                if found is None or self._stop_requested:
                    self._report_progress()
                    return stats
                await self._replace(found)
        finally:
            checking.cancel()

    async def _check(self, ledger: Ledger) -> None:
        """Damage the projector's writes have not met (yet): found by a whole-file check beside
        it, which stops it for ``run`` to replace the ledger."""
        problem = await asyncio.to_thread(quick_check, ledger)
        if problem is not None and ledger is self.ledger and not self._stop_requested:
            self._found = LedgerCorrupt(ledger.url, problem)
            if self.projector is not None:
                self.projector.stop()

    async def _replace(self, damage: LedgerCorrupt) -> None:
        """A fresh ledger in place of the damaged one, or ``ProjectionStopped``."""
        since = time.time()
        stream = await self.bus.stream_state()
        if self._file is None:
            self._stop(
                damage,
                since,
                "it is not an embedded SQLite file: restore it from a "
                "backup, or point HEDDLE_DATABASE_URL at an empty database to rebuild it "
                "from the stream",
            )
        # Purged rollouts: the latest ledger snapshot stands for the events up to its sequence.
        snapshot = await latest_snapshot(self.bus)
        floor = max(self.config.first_sequence, snapshot.sequence + 1 if snapshot else 0)
        if stream.num_messages and stream.first_sequence > floor:
            self._stop(
                damage,
                since,
                f"the stream no longer holds events #{floor}.."
                f"#{stream.first_sequence - 1} (retention or a purge past the latest ledger "
                "snapshot), so a rebuild would miss them: restore the ledger from a backup",
            )
        assert self._file is not None
        copy = await asyncio.to_thread(set_aside_once, self._file, self._opened)
        fresh = await asyncio.to_thread(open_ledger, self.ledger.url)
        self._opened = FileIdentity.of(self._file)
        consumer = self.config.consumer
        if snapshot is not None and await asyncio.to_thread(stored_position, fresh, consumer) == 0:
            await asyncio.to_thread(restore, snapshot.sequence, snapshot.database, fresh, consumer)
        where = f"moved it to {copy}" if copy is not None else "another process moved it aside"
        log.error(
            "%s; %s and rebuilding it from the stream (events #%d..#%d)",
            damage,
            where,
            floor,
            stream.last_sequence,
        )
        old, self.ledger = self.ledger, fresh
        self._found = None  # what the check found was about the old file
        old.close()
        if self.on_new_ledger is not None:
            self.on_new_ledger(fresh)
        health = LedgerHealth(
            state="rebuilding",
            ledger_url=fresh.url,
            reason=damage.reason,
            corrupt_copy=str(copy or ""),
            since=since,
            updated_at=time.time(),
            target_sequence=stream.last_sequence,
        )
        self._write(health)
        self._rebuilding = health
        self._reporter = asyncio.create_task(self._report_rebuilt())

    def _resume_report(self) -> None:
        """A keeper that starts after another stopped: a stop is forgotten (met again if the
        damage is still there), a rebuild in progress is reported on to its end."""
        health = read_health(self.settings.data_dir)
        if health is None or health.ledger_url != self.ledger.url:
            return
        if health.state == "stopped":
            with contextlib.suppress(OSError):
                health_path(self.settings.data_dir).unlink()
        elif health.state == "rebuilding":
            self._rebuilding = health
            self._reporter = asyncio.create_task(self._report_rebuilt())

    def _stop(self, damage: LedgerCorrupt, since: float, advice: str) -> None:
        reason = f"{damage.reason}; {advice}"
        log.error("ledger projection stopped: %s", f"{damage}; {advice}")
        self._write(
            LedgerHealth(
                state="stopped",
                ledger_url=self.ledger.url,
                reason=reason,
                since=since,
                updated_at=time.time(),
            )
        )
        raise ProjectionStopped(f"ledger projection stopped: {damage}; {advice}")

    async def _report_rebuilt(self) -> None:
        """Report a rebuild's progress until it is done (see ``_report_progress``)."""
        while True:
            if self._stop_requested or not self._report_progress():
                return
            await asyncio.sleep(_CAUGHT_UP_POLL_S)

    def _report_progress(self) -> bool:
        """Write where a rebuild is; ``ok`` once the fresh ledger has reached the stream as of
        the damage. False when no rebuild is left to report."""
        rebuilding = self._rebuilding
        if rebuilding is None:
            return False
        projector = self.projector
        position = projector.position if projector is not None else 0
        now = time.time()
        if position < rebuilding.target_sequence:
            self._write(msgspec.structs.replace(rebuilding, position=position, updated_at=now))
            return True
        self._write(
            msgspec.structs.replace(rebuilding, state="ok", position=position, updated_at=now)
        )
        log.info("ledger rebuilt from the stream up to #%d", position)
        self._rebuilding = None
        return False

    def _write(self, health: LedgerHealth) -> None:
        try:
            write_health(self.settings.data_dir, health)
        except OSError as exc:
            log.warning("cannot write the ledger health file: %s", exc)
