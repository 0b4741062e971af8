"""Where ``heddle status`` (and ``heddle rollout run``) read the control plane's state.

Two sources:

- ``<data_dir>/control-plane.json``, rewritten about once a second by a running control plane:
  its pid, whether it is ready (every consumer replayed and live, stale workers declared), and
  per consumer its position, lag, counts and recent batch latencies, per decider unit its
  counts and decision times; the live workers; the predictor. ``read_status`` returns it
  (None when absent or unreadable).
- JetStream itself: the control plane's durable (``control-plane``) holds its acknowledged
  position and pending count, readable from anywhere with ``consumer_positions`` (no access to
  the control plane's host needed).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import msgspec

from heddle.bus import Bus
from heddle.controlplane.host import ConsumerStats, UnitStats
from heddle.controlplane.latency import HistogramReport, quantile_ms
from heddle.controlplane.store_guard import StoreReport
from heddle.events.subjects import EVENTS_STREAM

STATUS_FILE = "control-plane.json"


class ConsumerReport(msgspec.Struct, frozen=True, kw_only=True):
    durable: str
    position: int
    num_pending: int
    num_replayed: int
    num_decided: int
    num_outputs: int
    num_rejected: int
    num_restarts: int = 0
    is_live: bool
    num_durable_losses: int = 0
    """Times the durable was found missing (deleted, or lost by the server) and recreated."""
    durable_lost_at: float = 0.0
    recreated_after: int = 0
    """The stream sequence it was last recreated after (the last event whose outputs were
    stored)."""
    batch_ms_p50: float = 0.0
    batch_ms_p99: float = 0.0
    batch_ms_max: float = 0.0
    age_ms_p50: float = 0.0
    """Age of recent events when decided (stored in the stream -> their batch decided): how far
    behind the stream the consumer runs."""
    age_ms_p99: float = 0.0
    decision_ms_p50: float = 0.0
    """Since the start: an event's arrival -> its outputs stored (events with outputs)."""
    decision_ms_p99: float = 0.0
    ages: HistogramReport = HistogramReport()
    """Every event's age since the start (a benchmark subtracts two snapshots)."""
    decisions: HistogramReport = HistogramReport()
    """Every decision latency since the start."""


class SlotReport(msgspec.Struct, frozen=True, kw_only=True):
    """One decider unit of the control plane's consumer: its share of the work."""

    slot: str
    num_decided: int
    num_outputs: int
    num_rejected: int
    decide_ms_p50: float = 0.0
    """Time the unit spent on a batch it had events of (milliseconds)."""
    decide_ms_p99: float = 0.0
    decide_ms_max: float = 0.0


class ControlPlaneStatus(msgspec.Struct, frozen=True, kw_only=True):
    pid: int
    started_at: float
    updated_at: float
    is_ready: bool
    nats_url: str
    ledger_url: str = ""
    predictor: str = ""
    num_predictor_samples: int = 0
    policies: list[str] = []
    live_workers: list[str] = []
    consumers: list[ConsumerReport] = []
    slots: list[SlotReport] = []
    """The units the consumers host (the router's stages, liveness, ...) and their decide times."""
    store: StoreReport | None = None
    """Whether the JetStream store takes writes (``heddle.controlplane.store_guard``)."""


class DurablePosition(msgspec.Struct, frozen=True, kw_only=True):
    durable: str
    ack_floor_sequence: int
    num_pending: int
    num_ack_pending: int


def consumer_report(stats: ConsumerStats, num_restarts: int = 0) -> ConsumerReport:
    latencies = sorted(stats.batch_ms)
    ages = sorted(stats.age_ms)
    decisions = stats.decisions.report()
    return ConsumerReport(
        durable=stats.durable,
        position=stats.position,
        num_pending=stats.num_pending,
        num_replayed=stats.num_replayed,
        num_decided=stats.num_decided,
        num_outputs=stats.num_outputs,
        num_rejected=stats.num_rejected,
        num_restarts=num_restarts,
        is_live=stats.is_live,
        num_durable_losses=stats.num_durable_losses,
        durable_lost_at=stats.durable_lost_at,
        recreated_after=stats.recreated_after,
        batch_ms_p50=_quantile(latencies, 0.5),
        batch_ms_p99=_quantile(latencies, 0.99),
        batch_ms_max=latencies[-1] if latencies else 0.0,
        age_ms_p50=_quantile(ages, 0.5),
        age_ms_p99=_quantile(ages, 0.99),
        decision_ms_p50=quantile_ms(decisions, 0.5),
        decision_ms_p99=quantile_ms(decisions, 0.99),
        ages=stats.ages.report(),
        decisions=decisions,
    )


def slot_report(stats: UnitStats) -> SlotReport:
    times = sorted(stats.decide_ms)
    return SlotReport(
        slot=stats.slot,
        num_decided=stats.num_decided,
        num_outputs=stats.num_outputs,
        num_rejected=stats.num_rejected,
        decide_ms_p50=_quantile(times, 0.5),
        decide_ms_p99=_quantile(times, 0.99),
        decide_ms_max=times[-1] if times else 0.0,
    )


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def status_path(data_dir: Path) -> Path:
    return data_dir / STATUS_FILE


def write_status(data_dir: Path, status: ControlPlaneStatus) -> None:
    """Replace the status file atomically (readers never see half a file)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = status_path(data_dir)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(msgspec.json.encode(status))
    temporary.replace(path)


def read_status(data_dir: Path) -> ControlPlaneStatus | None:
    try:
        return msgspec.json.decode(status_path(data_dir).read_bytes(), type=ControlPlaneStatus)
    except (OSError, msgspec.DecodeError):
        return None


async def consumer_positions(bus: Bus, durables: Iterable[str]) -> list[DurablePosition]:
    """Acknowledged position and lag of the named durables on the events stream (missing ones
    are left out)."""
    positions = []
    for durable in durables:
        state = await bus.consumer_state(EVENTS_STREAM, durable)
        if state is not None:
            positions.append(
                DurablePosition(
                    durable=durable,
                    ack_floor_sequence=state.ack_floor_sequence,
                    num_pending=state.num_pending,
                    num_ack_pending=state.num_ack_pending,
                )
            )
    return positions
