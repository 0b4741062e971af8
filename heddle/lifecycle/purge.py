"""``heddle purge``: remove archived rollouts from the stream and the object store.

A rollout is purged only when it is over (finished or cancelled) and its archive checks out
(``heddle.lifecycle.archive.verify_archive``) and still holds every event the stream has of it;
anything else is refused with the reason (``PurgeRefused``), and nothing is removed. Then:

1. the live ledger must have projected the rollouts' last events (waited for a while);
2. a replay rebuilds the ledger (from the latest snapshot, if any) up to the live ledger's
   position S and compares it with the live ledger; only if they match is the rebuild stored as
   the new ledger snapshot as of S (``heddle.bus.snapshots``);
3. each rollout's events up to S are purged from ``HEDDLE_EVENTS`` (events after S, if any
   arrived late, stay, and so do the snapshot's S), its arrays from bucket ``heddle-payloads``,
   trainers' durable consumers of it (``trainer-<name>-<rollout>``) deleted, and its messages
   purged from each per-trainer delivery stream (``HEDDLE_OUT_*``, subjects
   ``heddle.out.<trainer>.<rollout>.>``);
4. ``purged.json`` beside the archive's manifest records the purge;
5. worker commands (``HEDDLE_CMDS``, one subject per worker, so not purgeable per rollout)
   stored more than ``COMMANDS_MARGIN_S`` before the oldest rollout still in the stream was
   submitted are purged: they served rollouts that are gone (a worker that restarts is sent the
   latest weight version again, and its trajectories are placed afresh).

``heddle replay --verify`` then starts from the snapshot; a control plane with an empty ledger
restores it (``heddle.controlplane.ledger_restore``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from heddle.bus import Bus, ReplayQuery, ReplayRecord
from heddle.bus.purge import consumer_names, count_messages, purge_subject, stream_names
from heddle.bus.snapshots import Snapshot, store_snapshot
from heddle.completions import is_over
from heddle.config import Settings
from heddle.errors import UserError
from heddle.events.subjects import (
    COMMANDS_STREAM,
    COMMANDS_SUBJECTS,
    EVENTS_STREAM,
)
from heddle.ledger.snapshot import open_read_only
from heddle.ledger.snapshot_store import position, sqlite_bytes
from heddle.lifecycle.archive import ArchiveError, Manifest, rollout_subjects, verify_archive
from heddle.replay import open_replay

OUT_STREAM_PREFIX = "HEDDLE_OUT_"
COMMANDS_MARGIN_S = 60.0
"""Commands this much older than the oldest kept rollout's submission are purged (clock skew
between a cluster's servers stays far below it)."""
PURGED_FILE = "purged.json"


class PurgeRefused(UserError):
    """A rollout that may not be purged (running, not archived, archive stale), or a ledger
    that does not match its replay; nothing was removed."""


@dataclass(frozen=True)
class PurgeReport:
    rollout_ids: list[str]
    snapshot_sequence: int
    snapshot_bytes: int
    num_events: int
    """Messages removed from HEDDLE_EVENTS."""
    num_payloads: int
    num_consumers: int
    elapsed_s: float
    skipped: list[str] = field(default_factory=list)
    """Rollouts already purged (nothing left in the stream)."""
    num_commands: int = 0
    """Worker commands removed from HEDDLE_CMDS."""


async def purge_rollouts(
    settings: Settings, rollout_ids: Sequence[str], archive_dir: Path, *, wait_s: float = 60.0
) -> PurgeReport:
    """Purge ``rollout_ids`` (module docstring); ``PurgeRefused`` when any may not be."""
    started = time.perf_counter()
    async with Bus(settings) as bus:
        manifests, skipped = await _checked(bus, rollout_ids, archive_dir)
        if not manifests:
            return PurgeReport([], 0, 0, 0, 0, 0, time.perf_counter() - started, skipped)
        last = max(manifest.last_sequence for manifest in manifests)
        await _ledger_reached(settings, last, wait_s)
        snapshot = await _verified_snapshot(settings, last)
        size = await store_snapshot(bus, snapshot)
        removed = payloads = consumers = 0
        for manifest in manifests:
            counts = await _purge_one(bus, manifest.rollout_id, snapshot.sequence)
            removed, payloads, consumers = (removed + counts[0], payloads + counts[1],
                                            consumers + counts[2])  # fmt: skip
            record = {"snapshot_sequence": snapshot.sequence, "purged_at": time.time()}
            (archive_dir / manifest.rollout_id / PURGED_FILE).write_text(json.dumps(record))
        commands = await purge_old_commands(bus)
    ids = [manifest.rollout_id for manifest in manifests]
    elapsed = time.perf_counter() - started
    return PurgeReport(ids, snapshot.sequence, size, removed, payloads, consumers, elapsed,
                       skipped, commands)  # fmt: skip


async def _checked(
    bus: Bus, rollout_ids: Sequence[str], archive_dir: Path
) -> tuple[list[Manifest], list[str]]:
    manifests, skipped = [], []
    for rollout_id in rollout_ids:
        stored = await num_events(bus, rollout_id)
        if stored == 0 and (archive_dir / rollout_id / PURGED_FILE).is_file():
            skipped.append(rollout_id)
            continue
        if not await is_over(bus, rollout_id):
            raise PurgeRefused(f"rollout {rollout_id} is still running (or unknown): not purged")
        try:
            manifest = verify_archive(archive_dir / rollout_id)
        except ArchiveError as exc:
            raise PurgeRefused(f"rollout {rollout_id} is not archived: {exc}") from None
        if manifest.rollout_id != rollout_id or stored > manifest.num_events:
            raise PurgeRefused(
                f"rollout {rollout_id}: the stream holds {stored} events, its archive "
                f"{manifest.num_events}: archive it again (`heddle archive {rollout_id}`)"
            )
        manifests.append(manifest)
    return manifests, skipped


async def num_events(bus: Bus, rollout_id: str) -> int:
    """Messages ``HEDDLE_EVENTS`` holds of ``rollout_id``."""
    counts = [await count_messages(bus, EVENTS_STREAM, s) for s in rollout_subjects(rollout_id)]
    return sum(counts)


async def _ledger_reached(settings: Settings, sequence: int, wait_s: float) -> None:
    ledger = await asyncio.to_thread(open_read_only, settings.ledger_url)
    try:
        deadline = time.monotonic() + wait_s
        while (reached := await asyncio.to_thread(position, ledger)) < sequence:
            if time.monotonic() > deadline:
                raise PurgeRefused(
                    f"the ledger has projected up to {reached}, not the rollouts' last event "
                    f"({sequence}): is the control plane's projector running?"
                )
            await asyncio.sleep(0.2)
    finally:
        ledger.close()


async def _verified_snapshot(settings: Settings, last: int) -> Snapshot:
    async with open_replay(settings, live=True) as session:
        report = await session.verify()
        if not report.consistent:
            raise PurgeRefused(
                f"the live ledger differs from its replay ({report.num_mismatches} differences, "
                f"e.g. {report.mismatches[:3]}): nothing purged (`heddle replay --verify`)"
            )
        if report.sequence < last:
            raise PurgeRefused(f"the ledger went back below sequence {last}: nothing purged")
        database = await asyncio.to_thread(sqlite_bytes, session.ledger)
    return Snapshot(report.sequence, database)


async def _purge_one(bus: Bus, rollout_id: str, snapshot_sequence: int) -> tuple[int, int, int]:
    before = await num_events(bus, rollout_id)
    for subject in rollout_subjects(rollout_id):
        await purge_subject(bus, EVENTS_STREAM, subject, snapshot_sequence + 1)
    removed = before - await num_events(bus, rollout_id)
    payloads = await bus.delete_payloads(rollout_id)
    consumers = 0
    for name in await consumer_names(bus, EVENTS_STREAM):
        if name.startswith("trainer-") and name.endswith(f"-{rollout_id}"):
            consumers += int(await bus.delete_consumer(EVENTS_STREAM, name))
    for stream in await stream_names(bus, OUT_STREAM_PREFIX):
        await purge_subject(bus, stream, f"heddle.out.*.{rollout_id}.>")
    return removed, payloads, consumers


async def purge_old_commands(bus: Bus) -> int:
    """Purge worker commands stored ``COMMANDS_MARGIN_S`` before the oldest rollout still in
    the stream was submitted (before now, when none is); how many went."""
    oldest = await _first_record(bus, EVENTS_STREAM, "heddle.evt.rollout.*.submitted", None)
    cutoff = (oldest.stored_at if oldest is not None else time.time()) - COMMANDS_MARGIN_S
    when = datetime.datetime.fromtimestamp(max(cutoff, 0.0), datetime.UTC)
    first_kept = await _first_record(bus, COMMANDS_STREAM, COMMANDS_SUBJECTS, when)
    below = first_kept.stream_sequence if first_kept is not None else None
    if below is None:
        below = (await bus.stream_state(COMMANDS_STREAM)).last_sequence + 1
    if below < 2:
        return 0
    before = (await bus.stream_state(COMMANDS_STREAM)).num_messages
    await purge_subject(bus, COMMANDS_STREAM, COMMANDS_SUBJECTS, below)
    return before - (await bus.stream_state(COMMANDS_STREAM)).num_messages


async def _first_record(
    bus: Bus, stream: str, subject: str, since: datetime.datetime | None
) -> ReplayRecord[bytes] | None:
    query = ReplayQuery((subject,), start_sequence=None if since else 1, start_time=since,
                        batch_size=1)  # fmt: skip
    reader = bus.replay(query, _raw, stream=stream)
    batches = cast(AsyncGenerator[list[ReplayRecord[bytes]]], reader.batches())
    async with contextlib.aclosing(batches):
        async for batch in batches:
            if batch:
                return batch[0]
    return None


def _raw(data: bytes) -> bytes:
    return data
