"""The control plane's watch over the JetStream store: a stream that refuses writes (a full disk)
is reported, this process's producers pause, and once space is back the embedded server is
reset so the deployment resumes by itself.

Every ``interval_s`` ``StoreGuard.check_once`` asks:

- the embedded server of the data dir (``<data_dir>/nats.json``: its pid and monitoring port):
  ``/healthz`` names a stream's write error, ``statvfs`` the store's free space
  (``heddle.bus.store_health``). While a stream refuses writes and less than
  ``min_free_bytes`` (at most a tenth of the file system) is free, it waits; once that much is
  free it resets JetStream (a reload with it off, then on: nothing stored is lost, and every
  publisher's retry with the same id is stored once), at most once per ``reset_backoff_s``;
- any other server: its own publishes unacknowledged for ``stall_s`` while the server still
  answers JetStream requests (a write error is the likely cause; Heddle cannot reset a server
  it does not run, so the report says what the operator does).

Meanwhile ``Bus.hold_publishes`` keeps this process's publishes retrying past their deadline
(the deciders pause rather than fail and rebuild), the report (``StoreReport``) goes into
``control-plane.json`` for ``heddle status``, and the gauges ``heddle_stream_store_writable``
and ``heddle_stream_store_free_bytes`` and the counter ``heddle_stream_store_resets`` into the
metrics. Workers and executors pause on their own: they retry with the same ids until stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import msgspec

from heddle.bus import Bus
from heddle.bus.embedded import RECORD_NAME, ServerRecord, read_record
from heddle.bus.server import CONFIG_NAME
from heddle.bus.store_health import ResetFailed, StoreHealth, reset_jetstream, store_health
from heddle.config import Settings
from heddle.observability import Metrics

log = logging.getLogger(__name__)

_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class StoreGuardConfig:
    interval_s: float = 2.0
    min_free_bytes: int = 64 * _MIB
    """Free space (capped at a tenth of the file system) before a wedged store is reset: less,
    and the next write fills the disk again."""
    reset_backoff_s: float = 10.0
    stall_s: float = 20.0
    """A server Heddle does not run: publishes unacknowledged this long while it answers."""


class StoreReport(msgspec.Struct, frozen=True, kw_only=True):
    is_writable: bool = True
    reason: str = ""
    """Why not, in the server's words (or what this process saw)."""
    since: float = 0.0
    """When the refusal was first seen (0: writable)."""
    free_bytes: int | None = None
    """Free space where the embedded store lives (None: not on this machine)."""
    action: str = ""
    """What happens next, in words."""
    num_resets: int = 0
    last_reset_at: float = 0.0


class StoreGuard:
    def __init__(
        self,
        bus: Bus,
        settings: Settings,
        config: StoreGuardConfig | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.config = config or StoreGuardConfig()
        self.metrics = metrics
        self.report = StoreReport()
        self._last_reset_s = float("-inf")

    async def run(self) -> None:
        """Check every ``interval_s`` until cancelled."""
        while True:
            await self.check_once()
            await asyncio.sleep(self.config.interval_s)

    async def check_once(self) -> None:
        record = self._embedded_server()
        if record is not None:
            try:
                health = await asyncio.to_thread(
                    store_health, record.monitor_port, self.settings.nats_store_dir
                )
            except (OSError, ValueError):
                return  # the server is down or restarting: nothing to say about its store
            await self._embedded(record, health)
        else:
            self._update(await self._stalled(), None, action=_OPERATOR_ACTION)
        if self.metrics is not None:
            self.metrics.set_store(self.report.is_writable, self.report.free_bytes)

    def _embedded_server(self) -> ServerRecord | None:
        if not self.settings.uses_embedded_nats:
            return None
        record = read_record(self.settings.data_dir / RECORD_NAME)
        return record if record is not None and record.monitor_port else None

    async def _embedded(self, record: ServerRecord, health: StoreHealth) -> None:
        needed = self._needed_bytes(health)
        action = f"waiting for {needed / _MIB:.0f} MiB free on {self.settings.nats_store_dir}"
        self._update(health.write_error, health.free_bytes, action=action)
        if health.is_writable or health.free_bytes is None or health.free_bytes < needed:
            return
        if time.monotonic() - self._last_reset_s < self.config.reset_backoff_s:
            return
        await self._reset(record, health)

    def _needed_bytes(self, health: StoreHealth) -> int:
        total = health.total_bytes or self.config.min_free_bytes * 10
        return min(self.config.min_free_bytes, total // 10)

    async def _reset(self, record: ServerRecord, health: StoreHealth) -> None:
        self._last_reset_s = time.monotonic()
        free_mib = (health.free_bytes or 0) / _MIB
        log.warning(
            "%.0f MiB free on the JetStream store again: resetting JetStream (a reload with it "
            "disabled, then enabled) so that its streams take writes again",
            free_mib,
        )
        store_dir = self.settings.nats_store_dir
        try:
            await asyncio.to_thread(
                reset_jetstream, store_dir / CONFIG_NAME, store_dir, record.pid, record.monitor_port
            )
        except (ResetFailed, OSError) as exc:
            log.error("resetting JetStream failed: %s; trying again later", exc)
            return
        self.report = msgspec.structs.replace(
            self.report, num_resets=self.report.num_resets + 1, last_reset_at=time.time()
        )
        if self.metrics is not None:
            self.metrics.store_resets.inc()

    async def _stalled(self) -> str:
        """Why this process's writes look refused by a server that still answers ('' when
        they do not)."""
        waited_s = self.bus.unacknowledged_s()
        if waited_s < self.config.stall_s:
            return ""
        try:
            await asyncio.wait_for(self.bus.stream_state(), timeout=self.config.interval_s * 2)
        except Exception:
            return ""  # not answering at all: a lost connection, not a refused write
        return (
            f"nats-server has acknowledged no write of this control plane for {waited_s:.0f} s "
            "while it answers JetStream requests: a stream write error (a full disk?) is "
            "likely; its log and /healthz?details=true name it"
        )

    def _update(self, reason: str, free_bytes: int | None, *, action: str) -> None:
        was_writable = self.report.is_writable
        now = time.time()
        if reason:
            since = now if was_writable else self.report.since
            self.report = msgspec.structs.replace(
                self.report,
                is_writable=False,
                reason=reason,
                since=since,
                free_bytes=free_bytes,
                action=action,
            )
            if was_writable:
                log.error(
                    "the JetStream store refuses writes: %s; producers pause (%s)", reason, action
                )
        else:
            self.report = msgspec.structs.replace(
                self.report,
                is_writable=True,
                reason="",
                since=0.0,
                free_bytes=free_bytes,
                action="",
            )
            if not was_writable:
                log.warning("the JetStream store takes writes again; producers resume")
        with contextlib.suppress(RuntimeError):
            self.bus.hold_publishes(not self.report.is_writable)


_OPERATOR_ACTION = (
    "Heddle cannot reset a server it does not run: free space, then reload nats-server with "
    "JetStream disabled and enabled again, or restart it; producers resume by themselves"
)
