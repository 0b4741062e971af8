"""A control plane whose ledger is empty starts from the latest ledger snapshot when there is one
(old rollouts were purged from the stream, ``heddle purge``): the snapshot's rows are restored and
the projector continues after its sequence, so the new ledger matches the old one without the
purged events (``heddle.ledger.snapshot_store``)."""

from __future__ import annotations

import asyncio
import logging

from heddle.bus import Bus
from heddle.bus.snapshots import latest_snapshot
from heddle.ledger import LEDGER_CONSUMER, Ledger
from heddle.ledger.snapshot_store import position, restore

log = logging.getLogger(__name__)


async def restore_if_empty(bus: Bus, ledger: Ledger, consumer: str = LEDGER_CONSUMER) -> int:
    """Restore the latest snapshot into ``ledger`` when ``consumer`` has projected nothing yet;
    the snapshot's sequence (0: nothing restored)."""
    if await asyncio.to_thread(position, ledger, consumer) > 0:
        return 0
    snapshot = await latest_snapshot(bus)
    if snapshot is None:
        return 0
    await asyncio.to_thread(restore, snapshot.sequence, snapshot.database, ledger, consumer)
    log.info("ledger restored from the snapshot as of stream sequence %d", snapshot.sequence)
    return snapshot.sequence
