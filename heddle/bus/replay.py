"""Ordered replay of a stream: every message (or a filtered subset) from a sequence or a time.

The reader creates an ephemeral, unacknowledged, in-memory consumer and keeps a window of pull
requests in flight, so the server streams messages while the caller decodes and works; it yields
them in stream order and stops once caught up (the consumer reports nothing pending). Messages
the decoder refuses are skipped and counted (``num_skipped``): a live consumer dead-letters the
same messages, and their ``DeadLettered`` events are part of the stream too.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from heddle.bus.delivery import Decoder
from heddle.bus.pull import PullInbox
from heddle.bus.streams import ephemeral_config
from heddle.bus.transient import retry_transient
from heddle.bus.wire import LeanClient, parse_ack_subject
from heddle.events.subjects import subject_mismatch

T = TypeVar("T")
log = logging.getLogger(__name__)

_STALL_TIMEOUT_S = 10.0
"""No message for this long while requests are open: assume them lost and ask again."""


@dataclass(frozen=True, slots=True)
class ReplayRecord(Generic[T]):
    stream_sequence: int
    subject: str
    message: T
    stored_at: float = 0.0
    """Unix time (the server's clock) when the stream stored it; 0.0 when unknown."""


@dataclass(frozen=True, slots=True)
class ReplayQuery:
    """Which messages to replay; with neither start given, from the stream's beginning."""

    filter_subjects: tuple[str, ...]
    start_sequence: int | None = None
    start_time: datetime.datetime | None = None
    """First message stored at or after this time (timezone-aware)."""
    end_sequence: int | None = None
    """Last stream sequence to read (None: until caught up)."""
    batch_size: int = 1000
    """Messages per pull request (and at most per yielded batch)."""
    num_requests_in_flight: int = 2

    def __post_init__(self) -> None:
        if self.start_sequence is not None and self.start_time is not None:
            raise ValueError("replay from a sequence or from a time, not both")
        if self.start_sequence is not None and self.start_sequence < 1:
            raise ValueError("start_sequence must be >= 1")
        if self.start_time is not None and self.start_time.tzinfo is None:
            raise ValueError("start_time must be timezone-aware")
        if not self.filter_subjects:
            raise ValueError("replay needs at least one filter subject")
        if self.end_sequence is not None and self.end_sequence < 0:
            raise ValueError("end_sequence must be >= 0")


class ReplayReader(Generic[T]):
    """Reads ``query`` from ``stream`` once; iterate ``batches()`` or the reader itself."""

    def __init__(
        self,
        client: LeanClient,
        js: JetStreamContext,
        stream: str,
        query: ReplayQuery,
        decode: Decoder[T],
    ) -> None:
        self._client = client
        self._js = js
        self._stream = stream
        self._query = query
        self._decode = decode
        self.num_read = 0
        self.num_skipped = 0
        self.last_sequence = 0

    async def __aiter__(self) -> AsyncIterator[ReplayRecord[T]]:
        async for batch in self.batches():
            for record in batch:
                yield record

    async def batches(self) -> AsyncIterator[list[ReplayRecord[T]]]:
        """Lists of records in stream order until caught up."""
        start_sequence = self._query.start_sequence
        start_time = self._query.start_time
        while True:
            consumer, num_pending = await self._create_consumer(start_sequence, start_time)
            inbox = await PullInbox(self._client, self._stream, consumer).open()
            try:
                if num_pending == 0:
                    return
                async for batch in self._read(inbox):
                    yield batch
                if self._caught_up:
                    return
            finally:
                await inbox.close()
                await self._delete_consumer(consumer)
            # The window stalled (lost requests, reconnect): resume after the last record.
            log.warning(
                "replay of %s stalled; resuming after #%d", self._stream, self.last_sequence
            )
            start_sequence, start_time = self.last_sequence + 1, None
            if self.last_sequence == 0:
                start_sequence = self._query.start_sequence or 1
                start_time = self._query.start_time

    async def _read(self, inbox: PullInbox) -> AsyncIterator[list[ReplayRecord[T]]]:
        query = self._query
        window = query.batch_size * query.num_requests_in_flight
        self._caught_up = False
        while True:
            while inbox.num_requested + inbox.num_buffered < window:
                await inbox.request(query.batch_size)
            await inbox.wait(1, _STALL_TIMEOUT_S)
            raws = inbox.take(query.batch_size)
            if not raws:
                if inbox.last_status == b"404" and not inbox.has_open_requests:
                    self._caught_up = True
                    return
                if not inbox.has_open_requests:
                    return
                continue
            records: list[ReplayRecord[T]] = []
            decode = self._decode
            num_pending = 1
            end = query.end_sequence
            for subject, reply, data, _ in raws:
                info = parse_ack_subject(reply)
                if end is not None and info.stream_sequence > end:
                    num_pending = 0
                    break
                num_pending = info.num_pending
                self.last_sequence = info.stream_sequence
                try:
                    message = decode(data)
                    reason = subject_mismatch(subject.decode(), message)
                except ValueError as exc:
                    reason = str(exc)
                if reason is not None:
                    # Live consumers dead-letter these (heddle.bus.runner): skip them alike.
                    self.num_skipped += 1
                    log.warning("replay skips #%d (%s): %s", info.stream_sequence, subject, reason)
                    continue
                records.append(
                    ReplayRecord(
                        info.stream_sequence, subject.decode(), message, info.timestamp_ns * 1e-9
                    )
                )
            self.num_read += len(records)
            if records:
                yield records
            if num_pending == 0 or (end is not None and self.last_sequence >= end):
                self._caught_up = True
                return

    async def _create_consumer(
        self, start_sequence: int | None, start_time: datetime.datetime | None
    ) -> tuple[str, int]:
        config = ephemeral_config(
            self._query.filter_subjects, start_sequence=start_sequence, start_time=start_time
        )
        # An unanswered create leaves at most an ephemeral consumer that expires by itself.
        info = await retry_transient(
            lambda: self._js.add_consumer(self._stream, config), f"replay of {self._stream}"
        )
        return info.name, info.num_pending or 0

    async def _delete_consumer(self, consumer: str) -> None:
        if self._client.is_closed:
            return
        with contextlib.suppress(NotFoundError):
            await self._js.delete_consumer(self._stream, consumer)
