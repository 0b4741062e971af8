"""Reading consumer positions from NATS for ``heddle status``, without starting anything.

``heddle status`` must not start a server: with a configured URL it connects there; with the
embedded default it connects only to a server the data dir's record names (``nats.json``) that
is alive and answers. Anything else (no server, a refused connection) yields None and the status
shows what the ledger and the control plane's status file know.

The workers' state and load are the control plane's answer to ``heddle.ops.status`` (what
``heddle ops status`` prints): liveness and placements are the control plane's to know (the
ledger holds no heartbeats, which travel on core NATS), so both commands show one truth.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import msgspec

from heddle.bus import Bus, BusOptions, BusUnavailable
from heddle.bus.embedded import RECORD_NAME, answers, is_alive, read_record
from heddle.bus.micro import ServiceRefusal, ServiceUnavailable, request
from heddle.bus.replay import ReplayQuery
from heddle.config import Settings
from heddle.events import ExecutorRegistered
from heddle.events.subjects import EVENTS_STREAM, executor_event_subject

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DurableProbe:
    ack_floor_sequence: int
    num_unacked: int
    """Messages of its subjects not yet acknowledged (pending + delivered, unacked)."""


class LiveWorker(msgspec.Struct, frozen=True, kw_only=True):
    """A worker as the control plane sees it (``heddle.ops.status``)."""

    worker_id: str
    engine: str
    state: str
    """active, draining, drained or failed."""
    num_trajectories: int
    """Trajectories placed on it now."""
    heartbeat_age_s: float | None = None
    """Seconds since its latest heartbeat the control plane heard (None: none heard)."""
    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0


class _OpsStatus(msgspec.Struct, frozen=True):
    workers: list[LiveWorker] = []


@dataclass(frozen=True, slots=True)
class StreamProbe:
    last_sequence: int
    durables: dict[str, DurableProbe]
    executors: list[ExecutorRegistered] = field(default_factory=list)
    """Each tool executor's latest registration (its sandbox isolation level), by id."""
    workers: list[LiveWorker] | None = None
    """The control plane's workers (None: its operations service did not answer)."""


def running_nats_url(settings: Settings) -> str | None:
    """The configured URL, or the URL of the data dir's embedded server if it is running."""
    if settings.nats_url is not None:
        return settings.nats_url
    record = read_record(settings.data_dir / RECORD_NAME)
    if record is None or not is_alive(record.pid) or not answers(record.url):
        return None
    return record.url


async def probe_stream(
    settings: Settings, durables: Sequence[str], timeout_s: float = 5.0
) -> StreamProbe | None:
    """The events stream's head and these durables' positions, or None when NATS is not
    reachable without starting a server."""
    url = await asyncio.to_thread(running_nats_url, settings)
    if url is None:
        return None
    options = BusOptions(name="heddle-status", provision=False, connect_timeout_s=2.0)
    try:
        async with asyncio.timeout(timeout_s):
            async with Bus(replace(settings, nats_url=url), options) as bus:
                stream = await bus.stream_state(EVENTS_STREAM)
                found: dict[str, DurableProbe] = {}
                for durable in durables:
                    state = await bus.consumer_state(EVENTS_STREAM, durable)
                    if state is not None:
                        unacked = state.num_pending + state.num_ack_pending
                        found[durable] = DurableProbe(state.ack_floor_sequence, unacked)
                executors = await _executor_registrations(bus)
                workers = await live_workers(bus)
                return StreamProbe(stream.last_sequence, found, executors, workers)
    except (BusUnavailable, TimeoutError, OSError):
        return None
    except Exception as exc:  # best effort: a status must show what it can
        log.debug("stream probe failed: %r", exc)
        return None


async def live_workers(bus: Bus, timeout_s: float = 2.0) -> list[LiveWorker] | None:
    """The workers of the control plane's ``heddle.ops.status``; None when it does not answer."""
    try:
        reply = await request(bus, "heddle.ops.status", b"", timeout_s=timeout_s)
    except (ServiceUnavailable, ServiceRefusal):
        return None
    try:
        return msgspec.json.decode(reply, type=_OpsStatus).workers
    except msgspec.DecodeError:
        return None


async def _executor_registrations(bus: Bus) -> list[ExecutorRegistered]:
    """The latest ``ExecutorRegistered`` of each executor id in the events stream."""
    latest: dict[str, ExecutorRegistered] = {}
    query = ReplayQuery(filter_subjects=(executor_event_subject("*", "registered"),))
    async for record in bus.replay_events(query):
        if isinstance(record.message, ExecutorRegistered):
            latest[record.message.executor_id] = record.message
    return [latest[executor_id] for executor_id in sorted(latest)]
