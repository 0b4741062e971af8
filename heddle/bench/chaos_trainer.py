"""The chaos bench's trainer (``heddle bench chaos-trainer``) and the count of its record.

The trainer takes every rollout's completions through ``HeddleClient`` and writes one line per
trajectory handed to it, synced before it asks for the next (so before the client acknowledges
this one): a kill can cut the last line, never lose an acknowledged one.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from heddle.config import Settings

TRAINER_NAME = "chaos"


@dataclass(frozen=True, slots=True)
class RecordCounts:
    distinct: int
    duplicates: int
    """Repeats handed to one trainer process."""
    redelivered: int
    """Repeats handed to a later trainer process."""


def count_record(record: Path) -> RecordCounts:
    """Lines ``<trainer pid> <rollout id> <traj id>``, one per trajectory handed out (a last
    line without its newline was cut by a kill before the trajectory was acknowledged)."""
    lines = record.read_text().split("\n")[:-1] if record.exists() else []
    entries = [tuple(line.split()) for line in lines if line.count(" ") == 2]
    per_process = Counter(entries)
    distinct = {(rollout, traj) for _, rollout, traj in entries}
    duplicates = sum(count - 1 for count in per_process.values())
    return RecordCounts(len(distinct), duplicates, len(entries) - len(distinct) - duplicates)


async def record_completions(settings: Settings, rollout_ids: list[str], record: Path) -> None:
    """The trainer process: every rollout's completions, in order, one record line each
    (written and synced before the next is asked for, i.e. before this one is acknowledged)."""
    from heddle.client import HeddleClient

    pid = os.getpid()
    async with HeddleClient(settings, trainer=TRAINER_NAME) as client:
        with record.open("a") as out:
            for rollout_id in rollout_ids:
                async for trajectory in client.completions(rollout_id):
                    out.write(f"{pid} {rollout_id} {trajectory.traj_id}\n")
                    out.flush()
                    os.fsync(out.fileno())
