"""``MessageRunner``: one handler call per message, up to ``max_concurrent`` at a time (tool
executors, worker command consumers). See ``heddle.bus.runner`` for the shared contract."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TypeVar

from nats.js import JetStreamContext

from heddle.bus.delivery import (
    Decoder,
    Delivery,
    InvalidMessage,
    MessageHandler,
    Rejection,
    TransientError,
)
from heddle.bus.runner import IN_PROGRESS, ConsumerRunner, DeadLetterPublisher, Refused
from heddle.bus.streams import ConsumerSpec
from heddle.bus.wire import LeanClient

T = TypeVar("T")
log = logging.getLogger(__name__)


class MessageRunner(ConsumerRunner[T]):
    """Runs one handler call per message, up to ``max_concurrent`` at a time."""

    def __init__(
        self,
        client: LeanClient,
        js: JetStreamContext,
        spec: ConsumerSpec,
        decode: Decoder[T],
        handler: MessageHandler[T],
        dead_letter: DeadLetterPublisher,
        *,
        max_concurrent: int = 16,
    ) -> None:
        if spec.ack_all:
            raise ValueError(f"consumer {spec.durable}: concurrent handling needs explicit acks")
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be >= 1")
        super().__init__(client, js, spec, decode, dead_letter)
        self._handler = handler
        self._max_concurrent = max_concurrent
        self._active: dict[asyncio.Task[None], tuple[Delivery[T], float]] = {}
        self._failure: BaseException | None = None

    async def _loop(self) -> None:
        keepalive = asyncio.create_task(self._keep_alive())
        try:
            while not self._stopping and self._failure is None:
                free = self._max_concurrent - len(self._active)
                if free <= 0:
                    await asyncio.wait(list(self._active), return_when=asyncio.FIRST_COMPLETED)
                    continue
                raws = await self._fetch(min(free, self.spec.batch_size))
                for delivery in await self._decode_all(raws):
                    task = asyncio.create_task(self._handle(delivery))
                    self._active[task] = (delivery, time.monotonic())
                    task.add_done_callback(self._active.pop)
            if self._active:
                await asyncio.wait(list(self._active))
        finally:
            keepalive.cancel()
        if self._failure is not None:
            raise self._failure

    async def _is_caught_up(self) -> bool:
        return not self._active and await super()._is_caught_up()

    async def _handle(self, delivery: Delivery[T]) -> None:
        try:
            await self._handler(delivery)
        except InvalidMessage as exc:
            await self._reject(Refused.of(Rejection(delivery, exc.reason)))
            return
        except TransientError as exc:
            log.warning(
                "%s: transient error on #%d: %s", self.spec.durable, delivery.stream_sequence, exc
            )
            await self._nak([delivery], self.spec.nak_delay_s)
            return
        except Exception as exc:
            await self._nak([delivery], self.spec.nak_delay_s)
            self._failure = exc
            self.stop()
            return
        await self._ack(delivery)

    async def _keep_alive(self) -> None:
        """Tell the server that long-running handlers still work on their messages: every
        quarter of the ack wait, for each message held at least that long. A message hears
        from its runner at most half the ack wait after it came, then every quarter, so a late
        timer (a loaded machine) still leaves half the ack wait before the server gives it to
        another. (Every half, for messages held half, could touch one just before its ack
        wait ran out.)"""
        period_s = self.spec.ack_wait_s / 4
        while True:
            await asyncio.sleep(period_s)
            now = time.monotonic()
            for delivery, started_at in list(self._active.values()):
                if now - started_at >= period_s:
                    await self._send(delivery.ack_subject, IN_PROGRESS)
