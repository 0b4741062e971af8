"""``BatchRunner``: hands each fetched batch, decoded and in stream order, to one handler call
(ledger projector, deciders). See ``heddle.bus.runner`` for the shared contract.

With room for two batches in flight (``max_ack_pending >= 2 * batch_size``) the runner overlaps:
while the handler works on batch k (typically waiting for its SQL commit in a thread), batch k+1
is fetched and decoded. Handler calls stay sequential and in order, and batch k is acked only
when its handler returned. A transient error of an in-order (``ack_all``) consumer rewinds: what
was fetched after the failed batch is dropped and the durable restarts at the batch's first
sequence.

An in-order consumer that (re)creates its durable also checks that it receives every delivery
of it (consumer sequences 1, 2, 3, ... with no gap). A gap means another process took messages
from the same durable (two projectors started by mistake, a catch-up racing a service): the
runner then recreates the durable after the last batch it handled, instead of handling a batch
that does not follow its previous one. Deletion of the durable under the runner is handled the
same way.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TypeVar

from nats.js import JetStreamContext

from heddle.bus.delivery import BatchHandler, Decoder, Delivery, TransientError
from heddle.bus.pull import RawMessage, delivery_after
from heddle.bus.runner import ACK, ConsumerRunner, DeadLetterPublisher, Refused
from heddle.bus.streams import ConsumerSpec, provision_consumer
from heddle.bus.transient import retry_storage_refusals
from heddle.bus.wire import LeanClient, parse_ack_subject

T = TypeVar("T")
log = logging.getLogger(__name__)


class _Rewind(Exception):
    """Batch handling failed transiently: restart the durable at ``first_sequence``."""

    def __init__(self, first_sequence: int) -> None:
        super().__init__(first_sequence)
        self.first_sequence = first_sequence


class BatchRunner(ConsumerRunner[T]):
    """Hands each fetched batch (decoded, in stream order) to one handler call."""

    def __init__(
        self,
        client: LeanClient,
        js: JetStreamContext,
        spec: ConsumerSpec,
        decode: Decoder[T],
        handler: BatchHandler[T],
        dead_letter: DeadLetterPublisher,
    ) -> None:
        super().__init__(client, js, spec, decode, dead_letter)
        self._handler = handler
        self._in_flight: asyncio.Task[None] | None = None
        self._next_sequence = spec.start_sequence
        """Stream sequence after the last batch handled (in-order consumers resume there)."""
        self._next_delivery: int | None = None
        """Consumer sequence the next fetched message must have, on a durable this runner
        (re)created: a gap means another runner takes messages from the same durable."""

    async def _loop(self) -> None:
        spec = self.spec
        overlap = spec.max_ack_pending >= 2 * spec.batch_size
        try:
            while not self._stopping:
                raws = await self._fetch(spec.batch_size, prefetch=overlap)
                if raws and not self._continues_delivery(raws):
                    await self._consumer_lost()
                    continue
                deliveries = await self._decode_all(raws) if raws else []
                if not await self._settle(unhandled=deliveries):
                    continue
                if raws:
                    self._in_flight = asyncio.create_task(self._process(raws, deliveries))
                    if not overlap:
                        await self._settle(unhandled=[])
        finally:
            await self._settle(unhandled=[])

    async def _settle(self, *, unhandled: list[Delivery[T]]) -> bool:
        """Wait for the batch in flight. False when it rewound the consumer (``unhandled``,
        fetched meanwhile, is then stale); on any other failure ``unhandled`` is nak'ed."""
        task, self._in_flight = self._in_flight, None
        if task is None:
            return True
        try:
            await task
        except _Rewind as rewind:
            await self._rewind(rewind.first_sequence)
            return False
        except BaseException:
            await self._nak(unhandled, 0.0)
            raise
        return True

    async def _process(self, raws: list[RawMessage], deliveries: list[Delivery[T]]) -> None:
        rejected: set[int] = set()
        if deliveries:
            try:
                rejections = await self._handler(deliveries) or ()
            except TransientError as exc:
                log.warning("%s: transient error, retrying: %s", self.spec.durable, exc)
                if self.spec.ack_all:
                    self.stats.num_retried += len(deliveries)
                    first = parse_ack_subject(raws[0].reply).stream_sequence
                    raise _Rewind(exc.resume_sequence or first) from exc
                await self._nak(deliveries, self.spec.nak_delay_s)
                return
            except BaseException:
                await self._nak(deliveries, self.spec.nak_delay_s)
                raise
            for rejection in rejections:
                rejected.add(rejection.delivery.stream_sequence)
                await self._reject(Refused.of(rejection))
        self.stats.num_batches += 1
        await self._ack_batch(raws, deliveries, rejected)
        self._next_sequence = parse_ack_subject(raws[-1].reply).stream_sequence + 1

    async def _ack_batch(
        self, raws: list[RawMessage], deliveries: list[Delivery[T]], rejected: set[int]
    ) -> None:
        if self.spec.ack_all:
            await self._send(raws[-1].reply, ACK)
            self.stats.num_acked += len(deliveries) - len(rejected)
            return
        for delivery in deliveries:
            if delivery.stream_sequence not in rejected:
                await self._ack(delivery)

    async def _provision(self, spec: ConsumerSpec) -> None:
        what = f"consumer {spec.durable}"
        await retry_storage_refusals(lambda: provision_consumer(self._js, spec), what)
        self._next_delivery = 1 if spec.start_sequence is not None and spec.ack_all else None

    def _continues_delivery(self, raws: list[RawMessage]) -> bool:
        """Whether ``raws`` are exactly the next deliveries of this runner's durable."""
        if self._next_delivery is None:
            return True
        following = delivery_after(raws, self._next_delivery)
        if following is None:
            log.warning(
                "%s: deliveries %d..%d, expected from %d: another runner shares the durable",
                self.spec.durable,
                parse_ack_subject(raws[0].reply).consumer_sequence,
                parse_ack_subject(raws[-1].reply).consumer_sequence,
                self._next_delivery,
            )
            return False
        self._next_delivery = following
        return True

    async def _consumer_lost(self) -> None:
        """An in-order consumer recreates its durable after the last batch it handled; any
        other consumer stops (``ConsumerLost``): it cannot know what was left unacknowledged."""
        if not self.spec.ack_all:
            await super()._consumer_lost()
            return
        await self._settle(unhandled=[])
        log.warning("%s: durable deleted under the runner; recreating it", self.spec.durable)
        resume = self._next_sequence
        spec = self.spec if resume is None else replace(self.spec, start_sequence=resume)
        if self._inbox is not None:
            await self._inbox.close()
        await self._provision(spec)
        await self._open_inbox()

    async def _rewind(self, first_sequence: int) -> None:
        """Drop everything fetched, then restart the durable at ``first_sequence``."""
        if self._inbox is not None:
            await self._inbox.close()
            self._inbox = None
        await asyncio.sleep(self.spec.nak_delay_s)
        self._next_sequence = first_sequence
        await self._provision(replace(self.spec, start_sequence=first_sequence))
        await self._open_inbox()
