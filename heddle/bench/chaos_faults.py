"""The chaos bench's faults of the bus itself (``heddle bench chaos --nats-restarts N
--disk-full``): the embedded nats-server restarted as an operator would (down for ``down_s``,
then back on the same port and store), and its JetStream store's disk filled and freed.

The bench process starts the embedded server itself (``acquire_embedded_server``), so that it
can restart it; every other process of the deployment joins it through the data dir's record.
For ``--disk-full`` the store lives on a small tmpfs (``heddle.bench.small_disk``, root only):
it is filled mid-rollout, held full until the control plane reports the refusal (its status
file) and for ``hold_s`` more, then freed; the report says whether the refusal was seen and how
long the deployment took to take writes again (the control plane's JetStream reset).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heddle.bench.small_disk import SmallDisk
from heddle.bus.embedded import (
    SharedServer,
    acquire_embedded_server,
    release_embedded_server,
    restart_embedded_server,
)
from heddle.controlplane.status import read_status

_POLL_S = 0.25


@dataclass(frozen=True, slots=True)
class DiskFullReport:
    refused_writes_seen: bool
    """The control plane reported the store refusing writes while the disk was full."""
    full_s: float
    """Wall seconds the disk stayed full."""
    recovered_s: float | None
    """Wall seconds from freeing the disk to the control plane's report of writes taken again
    (None: not within the wait)."""
    num_resets: int
    """JetStream resets the control plane made (its status file)."""

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


async def restart_nats(shared: SharedServer, down_s: float) -> None:
    await asyncio.to_thread(restart_embedded_server, shared, down_s)


async def fill_and_free(
    disk: SmallDisk, data_dir: Path, hold_s: float, timeout_s: float
) -> DiskFullReport:
    """Fill the store's disk; once the refusal is reported (or ``timeout_s`` passed), keep it
    full ``hold_s`` more; free it and wait for writes to be taken again."""
    filled_at = time.monotonic()
    await asyncio.to_thread(disk.fill)
    seen = await _until(lambda: _store_writable(data_dir) is False, timeout_s)
    await asyncio.sleep(hold_s)
    full_s = time.monotonic() - filled_at
    disk.free()
    freed_at = time.monotonic()
    recovered = await _until(lambda: _store_writable(data_dir) is True, timeout_s)
    status = read_status(data_dir)
    resets = status.store.num_resets if status is not None and status.store is not None else 0
    return DiskFullReport(
        refused_writes_seen=seen,
        full_s=round(full_s, 1),
        recovered_s=round(time.monotonic() - freed_at, 1) if recovered else None,
        num_resets=resets,
    )


def _store_writable(data_dir: Path) -> bool | None:
    status = read_status(data_dir)
    if status is None or status.store is None:
        return None
    return status.store.is_writable


async def _until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(_POLL_S)
    return False


@dataclass(slots=True)
class BusFaults:
    """The bench's own embedded server (and the small disk under its store, for
    ``--disk-full``); ``async with`` it around the deployment."""

    data_dir: Path
    store_dir: Path
    store_bytes: int | None
    """A tmpfs of this size under the store (``--disk-full``), or None."""
    shared: SharedServer | None = None
    disk: SmallDisk | None = None
    num_restarts: int = 0

    async def __aenter__(self) -> BusFaults:
        if self.store_bytes is not None:
            self.disk = SmallDisk(self.store_dir, self.store_bytes).mount()
        try:
            self.shared = await asyncio.to_thread(
                acquire_embedded_server, self.data_dir, self.store_dir
            )
        except BaseException:
            if self.disk is not None:
                self.disk.unmount()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self.shared is not None:
            await asyncio.to_thread(release_embedded_server, self.shared)
        if self.disk is not None:
            self.disk.unmount()

    async def restart(self, down_s: float) -> None:
        assert self.shared is not None
        await restart_nats(self.shared, down_s)
        self.num_restarts += 1

    async def disk_full(self, hold_s: float, timeout_s: float) -> DiskFullReport:
        assert self.disk is not None
        return await fill_and_free(self.disk, self.data_dir, hold_s, timeout_s)
