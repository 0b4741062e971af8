"""Retention: which finished rollouts a training run no longer keeps in the stream, and applying
it (archive, then purge: ``heddle purge --retention``, or every few minutes beside the control
plane with ``heddle up --retention-every-s``).

A policy keeps the ``keep_rollouts`` most recently submitted rollouts and the rollouts that
finished less than ``keep_days`` ago (either bound may be unset; with both, a rollout goes once
either lets it go); a running rollout is always kept. Expired rollouts are archived under
``archive_dir`` (unless a valid archive is there) and purged (``heddle.lifecycle.purge``). The
policy comes from ``HEDDLE_RETENTION_KEEP_ROLLOUTS``, ``HEDDLE_RETENTION_KEEP_DAYS`` and
``HEDDLE_ARCHIVE_DIR`` (``heddle.config.load_retention``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from heddle.bus import Bus
from heddle.config import RetentionPolicy, Settings
from heddle.ledger import RolloutStatus, open_ledger, queries
from heddle.ledger.rows import RolloutRow
from heddle.lifecycle.archive import ArchiveError, archive_rollout, verify_archive
from heddle.lifecycle.purge import PURGED_FILE, PurgeReport, purge_rollouts

_SECONDS_PER_DAY = 86_400.0
log = logging.getLogger(__name__)


def expired(rollouts: Sequence[RolloutRow], policy: RetentionPolicy, now: float) -> list[str]:
    """The rollouts ``policy`` lets go (pure): ended, and outside the newest ``keep_rollouts``
    or ended more than ``keep_days`` before ``now``; oldest submission first."""
    ordered = sorted(rollouts, key=lambda row: (row.submitted_at or 0.0, row.rollout_id))
    ended = {RolloutStatus.FINISHED, RolloutStatus.CANCELLED}
    kept_by_count = set()
    if policy.keep_rollouts is not None:
        newest = ordered[max(0, len(ordered) - policy.keep_rollouts) :]
        kept_by_count = {row.rollout_id for row in newest}
    out = []
    for row in ordered:
        if row.status not in ended:
            continue
        by_count = policy.keep_rollouts is not None and row.rollout_id not in kept_by_count
        by_age = policy.keep_days is not None and (row.finished_at or now) < (
            now - policy.keep_days * _SECONDS_PER_DAY
        )
        if by_count or by_age:
            out.append(row.rollout_id)
    return out


@dataclass(frozen=True)
class RetentionReport:
    archived: list[str] = field(default_factory=list)
    purge: PurgeReport | None = None
    archive_s: float = 0.0


async def apply_retention(settings: Settings, policy: RetentionPolicy) -> RetentionReport:
    """Archive and purge what ``policy`` lets go (module docstring); rollouts purged before are
    left alone."""
    if policy.archive_dir is None:
        raise ValueError("retention archives before it purges: set HEDDLE_ARCHIVE_DIR")
    if policy.keep_rollouts is None and policy.keep_days is None:
        return RetentionReport()
    ledger = await asyncio.to_thread(open_ledger, settings.ledger_url)
    try:
        rows = await asyncio.to_thread(queries.rollouts, ledger)
    finally:
        ledger.close()
    folder = policy.archive_dir
    due = [r for r in expired(rows, policy, time.time()) if not (folder / r / PURGED_FILE).exists()]
    if not due:
        return RetentionReport()
    started = time.perf_counter()
    archived = []
    async with Bus(settings) as bus:
        for rollout_id in due:
            try:
                verify_archive(folder / rollout_id)
            except ArchiveError:
                await archive_rollout(bus, rollout_id, folder)
                archived.append(rollout_id)
    archive_s = time.perf_counter() - started
    return RetentionReport(archived, await purge_rollouts(settings, due, folder), archive_s)


async def retention_loop(
    settings: Settings, policy: RetentionPolicy, every_s: float, stop: asyncio.Event
) -> None:
    """Apply ``policy`` every ``every_s`` seconds until ``stop`` (``heddle up``); a refused or
    failed pass is logged and tried again next time, never stopping the control plane."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), every_s)
            return
        except TimeoutError:
            pass
        try:
            report = await apply_retention(settings, policy)
        except Exception:
            log.exception("retention pass failed; trying again in %g s", every_s)
            continue
        if report.purge is not None and report.purge.rollout_ids:
            log.info("retention archived %d and purged %d rollouts (snapshot at %d)",
                     len(report.archived), len(report.purge.rollout_ids),
                     report.purge.snapshot_sequence)  # fmt: skip
