"""Consumer lag for the metrics: polls the stream's last sequence and each durable's progress.

Lag is ``stream last sequence - ack floor`` (how far behind the stream head the consumer's
acknowledged position is; for a filtered consumer it also counts other subjects' messages) and
``pending`` is the exact count of the consumer's own messages not yet acknowledged. Each poll
also reads how many dead-letter records the events stream holds (``heddle_dead_letters``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.bus import Bus
from heddle.events.subjects import DEADLETTER_SUBJECT, EVENTS_STREAM
from heddle.observability.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    stream: str
    durable: str


class ConsumerLagTracker:
    """Updates ``heddle_consumer_lag_messages``, ``heddle_consumer_pending_messages`` and
    ``heddle_dead_letters``."""

    def __init__(self, bus: Bus, metrics: Metrics, consumers: Sequence[ConsumerRef]) -> None:
        self.bus = bus
        self.metrics = metrics
        self.consumers = list(consumers)

    async def poll(self) -> None:
        """One update of every consumer's gauges (a missing durable is skipped)."""
        last_by_stream: dict[str, int] = {}
        for ref in self.consumers:
            if ref.stream not in last_by_stream:
                state = await self.bus.stream_state(ref.stream)
                last_by_stream[ref.stream] = state.last_sequence
            consumer = await self.bus.consumer_state(ref.stream, ref.durable)
            if consumer is None:
                continue
            self.metrics.set_consumer_position(
                ref.durable,
                last_sequence=last_by_stream[ref.stream],
                ack_floor=consumer.ack_floor_sequence,
                num_unacked=consumer.num_pending + consumer.num_ack_pending,
            )
        num_dead = await self.bus.num_matching_messages(EVENTS_STREAM, DEADLETTER_SUBJECT)
        self.metrics.dead_letters.set(num_dead)

    async def run(self, stop: asyncio.Event, interval_s: float = 2.0) -> None:
        """Poll until ``stop`` is set; a failed poll (a reconnecting bus) is logged, and the
        next one tried after the interval."""
        while not stop.is_set():
            try:
                await self.poll()
            except Exception as exc:  # metrics must never stop the host
                log.warning("consumer lag poll failed: %r", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
