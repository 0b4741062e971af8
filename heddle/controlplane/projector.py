"""The live ledger projector: a durable pull consumer of ``heddle.evt.>`` feeding ``LedgerWriter``.

A damaged ledger makes ``run()`` raise ``heddle.ledger.integrity.LedgerCorrupt``; the projector's
keeper (``heddle.controlplane.ledger_recovery``) rebuilds it from the stream or stops.

Each fetched batch is written with its stream position in one transaction, then acknowledged
(one ack per batch: the consumer acks all, since it handles messages strictly in order). A batch
that does not continue the stored position (another process took the messages in between) is
refused and the durable rewound to the position (``heddle.controlplane.projector_gaps``). On
start the durable is recreated at the ledger's position + 1, so the SQL position, not the
server's ack state, decides where projection resumes; events at or below it are skipped.

Run it as a process with ``python -m heddle.controlplane.projector_process`` (``--help`` for
options), under its keeper.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, replace

from sqlalchemy.exc import OperationalError

from heddle.bus import BatchRunner, Bus, ConsumerSpec, Delivery, TransientError
from heddle.controlplane.projector_gaps import batch_start
from heddle.events import EventT
from heddle.events.subjects import EVENTS_STREAM, EVENTS_SUBJECTS, LEDGER_PROJECTOR_ROLE
from heddle.ledger.database import Ledger
from heddle.ledger.integrity import reading
from heddle.ledger.lean_decoder import decode_event_lean
from heddle.ledger.writer import LEDGER_CONSUMER, LedgerWriter, PositionConflict

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProjectorConfig:
    consumer: str = LEDGER_CONSUMER
    """Key of the position row (and the durable's name unless ``durable`` is set)."""
    durable: str | None = None
    """Durable consumer name when it differs from ``consumer``: a one-off catch-up uses its
    own durable, so that it does not delete the one of a projector service running meanwhile
    (both write through the same position, and the compare-and-set keeps them exact)."""
    filter_subjects: tuple[str, ...] = (EVENTS_SUBJECTS,)
    batch_size: int = 1000
    """Events per transaction."""
    fetch_wait_s: float = 1.0
    gather_s: float = 0.05
    """How long a fetch of fewer than ``batch_size`` events waits for more: the ledger trails
    the stream by up to this much more, and a live stream's events, which come one at a
    time, are written in batches instead of one transaction each (docs/benchmarks.md,
    "Projection at the live rate")."""
    nak_delay_s: float = 1.0
    """Pause before retrying a batch after a transient database error."""
    ack_wait_s: float = 60.0
    first_sequence: int = 1
    """Never project below this stream sequence (a ledger of part of the stream, e.g. a
    benchmark's own events)."""


@dataclass(frozen=True, slots=True)
class ProjectorStats:
    num_projected: int
    """Events written (redelivered ones at or below the position are not counted)."""
    num_batches: int
    position: int
    num_dead_lettered: int


class Projector:
    """Projects the event stream into ``ledger``; ``run()`` until ``stop()`` or caught up."""

    def __init__(self, bus: Bus, ledger: Ledger, config: ProjectorConfig | None = None) -> None:
        self._bus = bus
        self._ledger = ledger
        self.config = config or ProjectorConfig()
        self._writer: LedgerWriter | None = None
        self._num_projected = 0
        self._stop_requested = False
        self._runner: BatchRunner[EventT] | None = None

    @property
    def position(self) -> int:
        """The ledger's stream position as of the last batch written (0 before the first)."""
        return self._writer.position if self._writer is not None else 0

    def stop(self) -> None:
        """Finish the current batch, then return from ``run()``."""
        self._stop_requested = True
        if self._runner is not None:
            self._runner.stop()

    async def run(self, *, until_idle: bool = False) -> ProjectorStats:
        config = self.config
        with reading(self._ledger.url):
            writer = self._writer = await asyncio.to_thread(
                LedgerWriter, self._ledger, config.consumer, EVENTS_STREAM
            )
        spec = ConsumerSpec(
            durable=config.durable or config.consumer,
            stream=EVENTS_STREAM,
            filter_subjects=config.filter_subjects,
            role=LEDGER_PROJECTOR_ROLE,
            batch_size=config.batch_size,
            fetch_wait_s=config.fetch_wait_s,
            gather_s=config.gather_s,
            max_ack_pending=2 * config.batch_size,
            ack_wait_s=config.ack_wait_s,
            nak_delay_s=config.nak_delay_s,
            ack_all=True,
            start_sequence=max(writer.position + 1, config.first_sequence),
        )
        runner = self._bus.batch_runner(spec, decode_event_lean, self._project)
        self._runner = runner
        if self._stop_requested:
            runner.stop()
        stats = await runner.run(until_idle=until_idle)
        return ProjectorStats(
            num_projected=self._num_projected,
            num_batches=stats.num_batches,
            position=writer.position,
            num_dead_lettered=stats.num_dead_lettered,
        )

    async def _project(self, batch: list[Delivery[EventT]]) -> None:
        writer = self._writer
        assert writer is not None
        records = [(delivery.stream_sequence, delivery.message) for delivery in batch]
        first = await batch_start(
            self._bus,
            decode_event_lean,
            position=writer.position,
            first_record=records[0][0],
            filter_subjects=self.config.filter_subjects,
            floor=self.config.first_sequence,
        )
        try:
            with reading(self._ledger.url):
                num_projected = await asyncio.to_thread(
                    writer.project, records, first_sequence=first
                )
        except PositionConflict as exc:
            # Resume right after the stored position (re-read by the writer): a gap is filled
            # from there, and what another writer already projected is skipped.
            resume = max(writer.position + 1, self.config.first_sequence)
            raise TransientError(str(exc), resume_sequence=resume) from exc
        except OperationalError as exc:
            raise TransientError(str(exc)) from exc
        self._num_projected += num_projected


async def catch_up(
    bus: Bus, ledger: Ledger, config: ProjectorConfig | None = None
) -> ProjectorStats:
    """Project everything the ledger's projector has not yet, then return. Runs on a temporary
    durable (deleted afterwards), so a projector service running meanwhile is not disturbed."""
    base = config or ProjectorConfig()
    durable = f"{base.consumer}-catchup-{uuid.uuid4().hex[:8]}"
    try:
        return await Projector(bus, ledger, replace(base, durable=durable)).run(until_idle=True)
    finally:
        await bus.delete_consumer(EVENTS_STREAM, durable)
