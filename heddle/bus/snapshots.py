"""Where ledger snapshots are kept: bucket ``heddle-ledger-snapshots`` of the object store, one
gzip-compressed object per snapshot, named by the stream sequence it is as of
(``ledger-<S, 12 digits>.sqlite.gz``); only the latest is kept. What a snapshot holds and how it
is made and used is ``heddle.ledger.snapshot_store``'s business: here it is bytes."""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass

from heddle.bus.bus import Bus
from heddle.bus.purge import bucket_names, delete_bucket_object

SNAPSHOT_BUCKET = "heddle-ledger-snapshots"
_NAME = re.compile(r"^ledger-(\d{12})\.sqlite\.gz$")


@dataclass(frozen=True, slots=True)
class Snapshot:
    sequence: int
    """S: the stream sequence the snapshot is as of."""
    database: bytes
    """The SQLite file, uncompressed."""


def snapshot_name(sequence: int) -> str:
    return f"ledger-{sequence:012d}.sqlite.gz"


async def store_snapshot(bus: Bus, snapshot: Snapshot) -> int:
    """Keep ``snapshot`` and delete older ones; its size in the store (compressed)."""
    data = gzip.compress(snapshot.database, compresslevel=6)
    await bus.put_bucket_object(SNAPSHOT_BUCKET, snapshot_name(snapshot.sequence), data)
    for sequence in await _sequences(bus):
        if sequence < snapshot.sequence:
            await delete_bucket_object(bus, SNAPSHOT_BUCKET, snapshot_name(sequence))
    return len(data)


async def latest_snapshot(bus: Bus) -> Snapshot | None:
    """The newest snapshot, or None when none was taken."""
    sequences = await _sequences(bus)
    if not sequences:
        return None
    data = await bus.get_bucket_object(SNAPSHOT_BUCKET, snapshot_name(max(sequences)))
    return Snapshot(max(sequences), gzip.decompress(data))


async def _sequences(bus: Bus) -> list[int]:
    names = await bucket_names(bus, SNAPSHOT_BUCKET, "ledger-")
    return [int(match.group(1)) for name in names if (match := _NAME.match(name)) is not None]
