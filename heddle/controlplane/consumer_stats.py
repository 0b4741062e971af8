"""What ``heddle status`` shows of one decider consumer (``heddle.controlplane.host``), as the
consumer counts it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from heddle.controlplane.latency import LatencyHistogram

_LATENCY_WINDOW = 4096


@dataclass(slots=True)
class UnitStats:
    """One hosted unit's share of the work (``heddle status``, ``heddle bench control``)."""

    slot: str
    num_decided: int = 0
    num_outputs: int = 0
    num_rejected: int = 0
    decide_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    """Recent batches: time this unit spent deciding them (milliseconds)."""


@dataclass(slots=True)
class ConsumerStats:
    """What ``heddle status`` shows of one consumer (see ``heddle.controlplane.status``)."""

    durable: str
    position: int = 0
    """Stream sequence of the last event folded into the state."""
    num_replayed: int = 0
    num_decided: int = 0
    num_outputs: int = 0
    num_rejected: int = 0
    num_redelivered: int = 0
    num_pending: int = 0
    """Events of the units' kinds in the stream after the last delivery (the lag)."""
    is_live: bool = False
    batch_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    """Recent batches: time spent deciding them, all units and stages (milliseconds)."""
    age_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    """Recent events: their age when decided, from the stream storing them (the server's clock)
    to the start of their batch's decisions (ours): delivery and queueing delay, milliseconds."""
    ages: LatencyHistogram = field(default_factory=LatencyHistogram)
    """Every event's age (as ``age_ms``) since the consumer started."""
    decisions: LatencyHistogram = field(default_factory=LatencyHistogram)
    """Every event with outputs since the consumer started: its decision latency, from its
    arrival in this process to its outputs stored (their publish acknowledged), milliseconds."""
    units: dict[str, UnitStats] = field(default_factory=dict)
    """Per hosted unit: events decided, outputs, refusals and time spent."""
    num_durable_losses: int = 0
    """Times the durable was found missing (deleted, or lost by the server) and recreated."""
    durable_lost_at: float = 0.0
    """Wall time of the last loss (0.0: none)."""
    recreated_after: int = 0
    """The stream sequence the durable was last recreated after."""
