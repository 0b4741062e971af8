"""What the cluster bench observes of ``HEDDLE_EVENTS``: its whole content (to count the
acknowledged events a fault lost or changed: ``read_stream``), and its leader (``stream_leader``,
``wait_leader``, and ``LeaderWatcher`` counting how often it changed during a run).
"""

from __future__ import annotations

import asyncio
import hashlib
import time

from heddle.bus import Bus, ReplayQuery
from heddle.events.subjects import EVENTS_STREAM, EVENTS_SUBJECTS


async def read_stream(bus: Bus) -> dict[int, tuple[str, bytes]]:
    """Every message of ``HEDDLE_EVENTS``: sequence -> (subject, digest of its bytes)."""
    query = ReplayQuery((EVENTS_SUBJECTS,), start_sequence=1)
    reader = bus.replay(query, decode=_digest)
    return {record.stream_sequence: (record.subject, record.message) async for record in reader}


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


async def stream_leader(bus: Bus) -> str:
    """The events stream's leader ('' while none is elected or the request fails)."""
    try:
        info = await asyncio.wait_for(bus.js.stream_info(EVENTS_STREAM), 1.0)
    except Exception:
        return ""
    return (info.cluster.leader or "") if info.cluster is not None else ""


async def wait_leader(bus: Bus, *, not_this: str = "", timeout_s: float = 30.0) -> str:
    """The events stream's leader, asking until one other than ``not_this`` answers
    (``TimeoutError`` after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader = await stream_leader(bus)
        if leader and leader != not_this:
            return leader
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no leader of {EVENTS_STREAM} within {timeout_s:g} s")


class LeaderWatcher:
    """Polls the events stream's leader; ``num_changes``: how often it was seen to change."""

    def __init__(self, bus: Bus, period_s: float = 0.1) -> None:
        self.bus = bus
        self.period_s = period_s
        self.leaders: list[str] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def num_changes(self) -> int:
        return sum(1 for a, b in zip(self.leaders, self.leaders[1:], strict=False) if a != b)

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            leader = await stream_leader(self.bus)
            if leader and (not self.leaders or self.leaders[-1] != leader):
                self.leaders.append(leader)
            await asyncio.sleep(self.period_s)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
