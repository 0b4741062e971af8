"""``PipelinedRunner``: a pull loop for the control plane's deciders that never waits on the
network between decisions. See ``heddle.bus.runner`` for the contract it shares with the other
runners (decoding, dead letters, acknowledgements, the durable lost).

The bus's ``BatchRunner`` handles a batch, waits for its outputs to be stored, acknowledges,
then asks the server for more: two round trips to the server per batch on the critical path of
every step event. Deciding is a few microseconds per event, so those round trips are the
decision latency. This loop keeps the round trips off the critical path:

- pull requests for two batches stay open at the server, so stored events land in the inbox
  at once;
- each batch is decided as soon as it is taken, and its outputs start on their way
  (``publish_many`` in a task) while the next batch is decided;
- a batch is decided in *stages* (``decide`` yields one list of outputs per stage): a stage's
  outputs are sent before the next stage is decided, so the router's commands (the first stage
  of the control plane) never wait for the slower deciders of the same batch;
- acknowledgements go out strictly in order, each once its batch's outputs are stored (and its
  refused events dead-lettered, one dead letter per event whatever number of deciders refused
  it): the consumer acknowledges all up to a sequence at once, so an acknowledgement never
  covers an event whose outputs are not stored.

A durable that disappears (deleted, or lost by the server: its pull requests end with 409 or
503 and the server no longer knows it) stops the loop with ``DurableLost`` once every batch
taken is stored and acknowledged: the state is intact, and the host recreates the durable after
the last event it decided. A batch whose outputs cannot be stored stops the loop with
``ConsumerFailed`` (its decisions are in the state already; the host rebuilds the state from
the stream). So does a gap in the
consumer's delivery sequence: deliveries lost in transit (a cluster node died with a pull
response on its way) would otherwise be covered by the next acknowledgement and never decided;
the batches before the gap are acknowledged, the rebuilt consumer resumes right after them.
``stop()`` finishes the batches in flight, then returns; events delivered but not taken are given
back (nak).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from nats.js import JetStreamContext

from heddle.bus.delivery import Decoder, Delivery, Rejection
from heddle.bus.outbox import Outgoing
from heddle.bus.publisher import PublishError
from heddle.bus.pull import PullInbox, RawMessage, delivery_after
from heddle.bus.runner import (
    ACK,
    CONSUMER_TROUBLE,
    ConsumerRunner,
    DeadLetterPublisher,
    Refused,
)
from heddle.bus.state import consumer_state
from heddle.bus.streams import ConsumerSpec
from heddle.bus.wire import LeanClient, parse_ack_subject

T = TypeVar("T")
log = logging.getLogger(__name__)

_WAIT_MARGIN_S = 2.0


class Stage(NamedTuple):
    """One stage of a batch's decisions."""

    outputs: list[Outgoing]
    """In order: the deciders' events and commands, and stored events passed on
    (``heddle.bus.Forward``)."""
    rejections: list[Rejection]
    """The deliveries it refused."""
    arrivals: Sequence[float] = ()
    """``Delivery.received_at`` of the events these outputs answer: once the outputs are stored,
    ``on_stored`` gets them (decision latency: arrival to outputs stored)."""


Decide = Callable[[list[Delivery[T]]], Iterable[Stage]]
"""Decides a batch, stage by stage (each stage synchronously, when the runner asks for it)."""
Store = Callable[[Sequence[Outgoing]], Awaitable[object]]
"""Stores a stage's outputs (``Bus.publish_many``)."""
OnStored = Callable[[Sequence[float]], None]
"""Told the ``Stage.arrivals`` of each stage once its outputs are stored."""
BeforePublish = Callable[[Sequence[Outgoing]], Awaitable[Sequence[Outgoing]]]
"""Awaited before a stage's outputs are published: what to publish instead (the streams they go
to made, the records built: ``heddle.controlplane.gating.Screen.prepare``)."""


class ConsumerFailed(RuntimeError):
    """A consumer's state can no longer be trusted (outputs unpublished); rebuild it."""


class DurableLost(RuntimeError):
    """The durable is gone; every event taken from it is decided and its outputs stored."""


@dataclass(slots=True)
class _InFlight:
    stored: list[asyncio.Task[None]]
    """Publish the batch's outputs (one task per stage) and dead letters."""
    last_reply: bytes
    """Acknowledging this one acknowledges the whole batch (and everything before it)."""


class PipelinedRunner(ConsumerRunner[T]):
    """Drives one durable (``spec.ack_all`` must be set) with ``decide``; see module doc."""

    def __init__(
        self,
        client: LeanClient,
        js: JetStreamContext,
        spec: ConsumerSpec,
        decode: Decoder[T],
        decide: Decide[T],
        store: Store,
        dead_letter: DeadLetterPublisher,
        *,
        on_stored: OnStored | None = None,
        before_publish: BeforePublish | None = None,
    ) -> None:
        if not spec.ack_all:
            raise ValueError(f"consumer {spec.durable}: the pipeline acknowledges all at once")
        super().__init__(client, js, spec, decode, dead_letter)
        self._decide = decide
        self._store_outputs = store
        self._on_stored = on_stored
        self._before_publish = before_publish
        self._in_flight: asyncio.Queue[_InFlight | None] = asyncio.Queue()
        self._next_delivery = 1 if spec.start_sequence is not None else None
        """Consumer sequence the next delivery must have (the durable is recreated at
        ``start_sequence``, so its deliveries count from 1); None: not checked."""
        self._gap = ""
        self._is_lost = False
        self.acked_sequence = (spec.start_sequence or 1) - 1
        """Stream sequence up to which every event's outputs are stored and acknowledged."""

    async def _loop(self) -> None:
        inbox = self._inbox
        assert inbox is not None, "loop before open"
        acking = asyncio.create_task(self._acknowledge())
        try:
            while not self._stopping and not acking.done():
                raws = await self._take(inbox)
                if not raws and inbox.last_status in CONSUMER_TROUBLE:
                    inbox.last_status = b""
                    if await self._is_gone():
                        self._is_lost = True
                        break
                if raws and not self._continues_delivery(raws):
                    break
                if raws:
                    await self._start(raws)
        finally:
            self._in_flight.put_nowait(None)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({acking})
        acking.result()  # raises ConsumerFailed when outputs could not be stored
        if self._gap:
            raise ConsumerFailed(self._gap)
        if self._is_lost:
            raise DurableLost(f"durable {self.spec.durable} of {self.spec.stream} is gone")

    async def _is_gone(self) -> bool:
        """Whether the server no longer knows the durable (a cluster electing its leader
        answers late or not at all: not gone)."""
        try:
            return await consumer_state(self._js, self.spec.stream, self.spec.durable) is None
        except Exception as exc:
            log.info("%s: consumer info unavailable (%r)", self.spec.durable, exc)
        return False

    def _continues_delivery(self, raws: Sequence[RawMessage]) -> bool:
        """Whether ``raws`` are exactly the durable's next deliveries (else the gap is noted)."""
        if self._next_delivery is None:
            return True
        following = delivery_after(raws, self._next_delivery)
        if following is not None:
            self._next_delivery = following
            return True
        first = parse_ack_subject(raws[0].reply).consumer_sequence
        last = parse_ack_subject(raws[-1].reply).consumer_sequence
        self._gap = (
            f"{self.spec.durable}: deliveries {first}..{last}, expected from "
            f"{self._next_delivery}: some were lost in transit (or another runner shares the "
            "durable); rebuilding from the stream"
        )
        log.warning("%s", self._gap)
        return False

    async def _take(self, inbox: PullInbox) -> list[RawMessage]:
        """What the inbox holds (at most a batch), else the first event to arrive. Two batches'
        worth of pull requests stay open, so events arrive as soon as they are stored and no
        round trip to ask for more is on the critical path; bounded, so that a burst of large
        events never piles up at the connection (the server cuts slow consumers off)."""
        wait_s, batch_size = self.spec.fetch_wait_s, self.spec.batch_size
        while inbox.num_requested + inbox.num_buffered < 2 * batch_size:
            await inbox.request(batch_size, expires_s=wait_s)
        if not inbox.num_buffered:
            await inbox.wait(1, wait_s + _WAIT_MARGIN_S)
        return inbox.take(batch_size)

    async def _start(self, raws: list[RawMessage]) -> None:
        """Decide the batch stage by stage, each stage's outputs sent before the next stage is
        decided; queue its acknowledgement behind their storage."""
        deliveries, refused = self._decode_batch(raws)
        stored: list[asyncio.Task[None]] = []
        rejected: dict[int, Refused] = {}
        for outputs, rejections, arrivals in self._decide(deliveries) if deliveries else ():
            for rejection in rejections:
                _merge(rejected, rejection)
            if outputs:
                stored.append(asyncio.create_task(self._store(outputs, [], arrivals)))
                await _let_writes_out()
        refused += rejected.values()
        if refused or not stored:
            stored.append(asyncio.create_task(self._store([], refused)))
        self._in_flight.put_nowait(_InFlight(stored, raws[-1].reply))

    async def _store(
        self, outputs: Sequence[Outgoing], refused: list[Refused], arrivals: Sequence[float] = ()
    ) -> None:
        try:
            if outputs:
                if self._before_publish is not None:
                    outputs = await self._before_publish(outputs)
                await self._store_outputs(outputs)
                if self._on_stored is not None:
                    self._on_stored(arrivals)
            for message in refused:
                await self._reject(message)
        except (PublishError, TimeoutError, ConnectionError) as exc:
            raise ConsumerFailed(f"{self.spec.durable}: outputs not stored: {exc}") from exc

    async def _acknowledge(self) -> None:
        """Acknowledge batches in order, each once its outputs are stored. Batches queued
        behind a stored one whose outputs are stored too are acknowledged with it, by one
        acknowledgement of the last (it covers all before it): a control plane that fell
        behind sends one message, not one per batch."""
        queued: list[_InFlight | None] = []
        while True:
            batch = queued.pop() if queued else await self._in_flight.get()
            if batch is None:
                return
            await self._stored(batch)
            while not self._in_flight.empty():
                following = self._in_flight.get_nowait()
                if following is None or not all(task.done() for task in following.stored):
                    queued.append(following)
                    break
                await self._stored(following)
                batch = following
            await self._send(batch.last_reply, ACK)
            self.acked_sequence = parse_ack_subject(batch.last_reply).stream_sequence

    async def _stored(self, batch: _InFlight) -> None:
        """Wait for the batch's outputs to be stored; ``ConsumerFailed`` stops the loop."""
        try:
            for stored in batch.stored:
                await stored
        except ConsumerFailed:
            self.stop()
            raise


def _merge(rejected: dict[int, Refused], rejection: Rejection) -> None:
    """One dead letter per refused event, whatever number of deciders refused it."""
    sequence = rejection.delivery.stream_sequence
    earlier = rejected.get(sequence)
    reason = rejection.reason
    if earlier is not None:
        if reason in earlier.reason:
            return
        reason = f"{earlier.reason}; {reason}"
    rejected[sequence] = Refused.of(Rejection(rejection.delivery, reason))


async def _let_writes_out() -> None:
    """Yield twice: once for the publishing task to hand its messages to the client, once for
    the client's flusher to write them to the socket."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)
