"""One control-plane slot as a durable JetStream pull consumer: replay, then decide live.

Lifecycle of ``DeciderConsumer.run()``:

1. **Position.** The durable ``control-<slot>``'s ack floor is the last event whose outputs are
   stored. A durable that does not exist yet adopts the stream as it is: everything already in
   it counts as handled (its outputs, if any were due, are not produced again), so a control
   plane started on an old data dir does not re-place old rollouts.
2. **Replay.** Every event of the slot's kinds up to that position goes through ``decide`` with
   the outputs discarded (they were published the first time): the state is rebuilt exactly as
   the simulator would have built it from the same events.
3. **Live.** The durable is recreated at position + 1 (so the unacknowledged tail is delivered
   at once, whatever the server's redelivery timers say) and driven by
   ``heddle.consumers.pipeline.PipelinedRunner``: each batch is decided event by event in stream
   order as soon as it arrives, its outputs go out in order (``publish_many``, ids derived from
   the input, so a re-run after a crash stores nothing twice) while the next batch is decided,
   and batches are acknowledged in order, each only once its outputs are stored.

A delivery at or below the position is a redelivery of an event already decided (an ack lost in
a reconnect): it is acknowledged without deciding it again. An event the deciders refuse (a
submission naming no bundle, or a decider raising) is dead-lettered and the rest of the batch
goes on; in replay the same event is skipped the same way. Outputs that cannot be published
within the bus's retry deadline stop the consumer with ``ConsumerFailed``: its state is ahead of
what is stored, so the host rebuilds it from the stream rather than go on.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from heddle.bus import (
    Bus,
    ConsumerSpec,
    Delivery,
    Rejection,
    ReplayQuery,
    ReplayRecord,
)
from heddle.consumers.filters import filter_subjects
from heddle.consumers.lean import decoder_for
from heddle.consumers.pipeline import PipelinedRunner
from heddle.consumers.slots import UnknownPolicy
from heddle.control import Output
from heddle.events import Event, EventT
from heddle.events.subjects import EVENTS_STREAM
from heddle.observability.metrics import BatchObserver

log = logging.getLogger(__name__)


class Hosted(Protocol):
    """What a consumer hosts: a slot's deciders (``SlotDeciders``) or the liveness fold."""

    @property
    def slot(self) -> str: ...

    @property
    def handles(self) -> frozenset[type[Event]]: ...

    def decide(self, event: Event) -> list[Output]: ...


_LATENCY_WINDOW = 4096


@dataclass(frozen=True, slots=True)
class HostConfig:
    durable_prefix: str = "control"
    """Durable names are ``<prefix>-<slot>``."""
    batch_size: int = 64
    """Most events decided (and their outputs published) per acknowledgement. Small batches
    bound how long one consumer holds the event loop that every slot of the process shares, so
    a step event waits at most for a short burst of other decisions."""
    max_ack_pending: int = 4096
    ack_wait_s: float = 120.0
    """Longer than the bus's publish retry deadline, so a batch whose outputs are still being
    retried is not redelivered meanwhile."""
    fetch_wait_s: float = 1.0
    since_sequence: int = 1
    """Events before this stream sequence belong to other runs: never replayed nor decided
    (a control plane of one isolated run, e.g. each run of ``heddle rollout compare``)."""

    def durable(self, slot: str) -> str:
        return f"{self.durable_prefix}-{slot}"


@dataclass(slots=True)
class ConsumerStats:
    """What ``heddle status`` shows of one consumer (see ``heddle.consumers.status``)."""

    durable: str
    position: int = 0
    """Stream sequence of the last event folded into the state."""
    num_replayed: int = 0
    num_decided: int = 0
    num_outputs: int = 0
    num_rejected: int = 0
    num_redelivered: int = 0
    num_pending: int = 0
    """Events of the slot's kinds in the stream after the last delivery (the lag)."""
    is_live: bool = False
    batch_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    """Recent batches: from the handler's start to its outputs stored (milliseconds)."""
    age_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    """Recent batches: age of their newest event when decided (its publisher's clock to ours:
    stream, delivery and queueing delay, in milliseconds)."""


class DeciderConsumer:
    """Hosts one slot (its deciders for every bundle in use) on a durable consumer."""

    def __init__(
        self,
        bus: Bus,
        slot: Hosted,
        config: HostConfig | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
        on_batch: BatchObserver | None = None,
    ) -> None:
        self.bus = bus
        self.slot = slot
        self.config = config = config or HostConfig()
        self.durable = config.durable(slot.slot)
        self.filter_subjects = filter_subjects(slot.handles)
        self.stats = ConsumerStats(self.durable)
        self._decode = decoder_for(slot.slot)
        self._clock = clock
        self._wall = wall
        self._on_batch = on_batch
        self._runner: PipelinedRunner | None = None
        self._stopping = False

    def stop(self) -> None:
        """Finish the current batch (outputs stored, acknowledged), then return from ``run``."""
        self._stopping = True
        if self._runner is not None:
            self._runner.stop()

    async def run(
        self, *, on_replayed: Callable[[], Awaitable[None]] | None = None
    ) -> ConsumerStats:
        """Replay up to the durable's position (then await ``on_replayed``), then decide live
        until ``stop()``."""
        position = await self.position()
        await self.replay(position)
        if on_replayed is not None:
            await on_replayed()
        if self._stopping:
            return self.stats
        spec = ConsumerSpec(
            durable=self.durable,
            stream=EVENTS_STREAM,
            filter_subjects=self.filter_subjects,
            batch_size=self.config.batch_size,
            fetch_wait_s=self.config.fetch_wait_s,
            max_ack_pending=self.config.max_ack_pending,
            ack_wait_s=self.config.ack_wait_s,
            ack_all=True,
            start_sequence=position + 1,
        )
        self._runner = PipelinedRunner(self.bus, spec, self._decode, self._decide)
        self.stats.is_live = True
        try:
            await self._runner.run()
        finally:
            self.stats.is_live = False
            self._runner = None
        return self.stats

    async def position(self) -> int:
        """The last stream sequence whose outputs are stored (see the module docstring)."""
        state = await self.bus.consumer_state(EVENTS_STREAM, self.durable)
        if state is None:
            last = (await self.bus.stream_state()).last_sequence
            return max(last, self.config.since_sequence - 1)
        return max(state.ack_floor_sequence, self.config.since_sequence - 1)

    async def replay(self, position: int) -> None:
        """Fold every event of the slot's kinds up to ``position`` into the state."""
        self.stats.position = position
        if position <= 0:
            return
        if position < self.config.since_sequence:
            return
        start = max(1, self.config.since_sequence)
        query = ReplayQuery(filter_subjects=self.filter_subjects, start_sequence=start)
        # ``batches`` is an async generator: close it when we stop early, so its ephemeral
        # consumer is deleted now rather than when the generator is collected.
        batches = cast(AsyncGenerator[list[ReplayRecord[EventT]]], self._replay_batches(query))
        try:
            async for batch in batches:
                for record in batch:
                    if record.stream_sequence > position or self._stopping:
                        return
                    self._fold(record.message, record.stream_sequence)
                    self.stats.num_replayed += 1
        finally:
            await batches.aclose()

    def _replay_batches(self, query: ReplayQuery) -> AsyncIterator[list[ReplayRecord[EventT]]]:
        return self.bus.replay(query, self._decode).batches()

    def _fold(self, event: Event, sequence: int) -> list[Output]:
        try:
            return self.slot.decide(event)
        except UnknownPolicy:
            return []
        except Exception:
            log.exception("%s: replay skips #%d (refused when live)", self.durable, sequence)
            return []

    def _decide(self, batch: list[Delivery[EventT]]) -> tuple[list[Output], list[Rejection]]:
        """Decide a batch in stream order; the runner stores the outputs, then acknowledges."""
        started, received_at = self._clock(), self._wall()
        outputs: list[Output] = []
        rejections: list[Rejection] = []
        stats = self.stats
        for delivery in batch:
            if delivery.stream_sequence <= stats.position:
                stats.num_redelivered += 1
                continue
            try:
                outputs += self.slot.decide(delivery.message)
            except Exception as exc:
                rejections.append(Rejection(delivery, _reason(exc)))
                if not isinstance(exc, UnknownPolicy):
                    log.exception("%s: refused #%d", self.durable, delivery.stream_sequence)
            stats.position = delivery.stream_sequence
            stats.num_decided += 1
        stats.num_rejected += len(rejections)
        stats.num_outputs += len(outputs)
        stats.num_pending = batch[-1].num_pending
        stats.age_ms.append((received_at - batch[-1].message.occurred_at) * 1000.0)
        elapsed_s = self._clock() - started
        stats.batch_ms.append(elapsed_s * 1000.0)
        if self._on_batch is not None:  # metrics (heddle.observability)
            self._on_batch([delivery.message for delivery in batch], outputs, elapsed_s)
        return outputs, rejections


def _reason(exc: Exception) -> str:
    if isinstance(exc, UnknownPolicy):
        return str(exc)
    return f"decider failed: {type(exc).__name__}: {exc}"
