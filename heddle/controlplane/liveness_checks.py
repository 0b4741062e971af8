"""The control plane's periodic liveness check, beside the consumer that folds heartbeats.

``LivenessChecks(bus, consumer, liveness, interval_s).run()`` subscribes to heartbeats (core
NATS, folded in as they arrive: ``WorkerLiveness.heard``; silence counts from the subscription
on), then every ``interval_s`` declares silent workers failed and publishes their ``WorkerFailed``
events, but only once every event stored before the check (every heartbeat sent before it) is
folded in: the consumer being busy (batches awaiting acknowledgement) does not delay a check,
the consumer lagging (events stored, not yet delivered) skips it. ``on_checked`` is called
after each check that ran.

Silence that is the control plane's own is not the workers'. While its connection was down:
each check counts silence from the bus's latest reconnection at the earliest
(``Bus.reconnected_at_s``), and none runs while the connection is down, so a nats-server
restart fails no live worker, whichever side reconnects first. While the process itself did
not run (starved of CPU, paused): a check that wakes more than half a timeout late judges
nothing and counts silence from then, as the heartbeats sent meanwhile wait unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from heddle.bus import Bus
from heddle.controlplane.host import DeciderConsumer
from heddle.controlplane.liveness import WorkerLiveness
from heddle.events.subjects import EVENTS_STREAM

log = logging.getLogger(__name__)

_FOLD_POLL_S = 0.01
_STALL_PROBE_S = 0.1


class LivenessChecks:
    def __init__(
        self,
        bus: Bus,
        consumer: DeciderConsumer,
        liveness: WorkerLiveness,
        interval_s: float,
        on_checked: Callable[[], None],
    ) -> None:
        self.bus = bus
        self.consumer = consumer
        self.liveness = liveness
        self.interval_s = interval_s
        self.on_checked = on_checked

    async def run(self) -> None:
        """Check every ``interval_s`` until cancelled."""
        heartbeats = await self.bus.subscribe_heartbeats(self.liveness.heard)
        self.liveness.start_listening(time.time())
        watching = asyncio.create_task(self._watch_stalls())
        try:
            while True:
                await asyncio.sleep(self.interval_s)
                await self.check_once()
        finally:
            watching.cancel()
            with contextlib.suppress(Exception):
                await heartbeats.unsubscribe()

    async def _watch_stalls(self) -> None:
        """Restart listening after this process did not run for half a timeout (CPU
        starvation, a long pause): heartbeats that came meanwhile wait unread. A wake-up that
        much late says so; a check suspended across the stall judges by its own earlier
        ``now`` and a later one comes after this (it awaits the server before judging)."""
        stall_s = self.liveness.timeout_s / 2
        while True:
            slept_at = time.monotonic()
            await asyncio.sleep(_STALL_PROBE_S)
            late_s = time.monotonic() - slept_at - _STALL_PROBE_S
            if late_s > stall_s:
                log.info(
                    "the control plane did not run for %.1f s: silence counts from now", late_s
                )
                self.liveness.start_listening(time.time())

    async def check_once(self) -> None:
        consumer = self.consumer
        if not consumer.stats.is_live:
            return
        now_s = time.time()
        state = await self.bus.consumer_state(EVENTS_STREAM, consumer.durable)
        if state is None or state.num_pending:
            return
        if not await _folded(consumer, state.delivered_sequence, self.interval_s):
            return
        if self.bus.is_connection_lost:
            return  # heartbeats cannot reach us now: silence is not the workers'
        self.liveness.start_listening(self.bus.reconnected_at_s)
        failures = self.liveness.check(now_s)
        if failures:
            for failure in failures:
                log.warning("worker %s failed: %s", failure.worker_id, failure.reason)
            await self.bus.publish_many(failures)
        self.on_checked()


async def _folded(consumer: DeciderConsumer, sequence: int, timeout_s: float) -> bool:
    """Wait until the consumer has folded in every event up to ``sequence`` (False: it did
    not within ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while consumer.stats.position < sequence:
        if time.monotonic() > deadline or not consumer.stats.is_live:
            return False
        await asyncio.sleep(_FOLD_POLL_S)
    return True
