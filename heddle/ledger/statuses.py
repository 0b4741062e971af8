"""The ``status`` column of each ledger table, typed: one ``StrEnum`` per table.

The values are the strings the database stores (and the Alembic migrations' defaults), so
databases written before these types existed read back unchanged. ``StatusType`` is the column
type: ``VARCHAR(16)`` in the DDL, the enum member in Python (an unknown stored value raises).
A trajectory's ledger status is a stored, coarser vocabulary than its lifecycle phase
(``heddle.events.TrajectoryPhase``): it also records placement and retryable failures.
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar

from sqlalchemy import String
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator


class RolloutStatus(enum.StrEnum):
    RUNNING = "running"
    """Submitted and not ended."""
    FINISHED = "finished"
    """Every trajectory ended (``RolloutFinished``)."""
    CANCELLED = "cancelled"
    """Cancelled by an operator; stays so even when a ``RolloutFinished`` follows."""


class TrajectoryStatus(enum.StrEnum):
    SUBMITTED = "submitted"
    """Known, never placed."""
    PLACED = "placed"
    """Placed on a worker (first placement, or re-placement after an interruption)."""
    GENERATING = "generating"
    """A generation started and has no result yet."""
    GENERATED = "generated"
    """The last generation finished; no tool call recorded after it yet."""
    IN_TOOL = "in_tool"
    """A tool call is out."""
    WAITING = "waiting"
    """Preempted, or the tool returned: the next generation has not started."""
    INTERRUPTED = "interrupted"
    """Failed retryably (its worker died or refused it): it waits to be placed again."""
    COMPLETED = "completed"
    FAILED = "failed"
    """Failed for good."""
    RESUBMITTED = "resubmitted"
    """Went stale; its slot runs afresh under another id (``Failed.resubmitted_as``)."""


class WorkerStatus(enum.StrEnum):
    ACTIVE = "active"
    """Registered and accepting trajectories."""
    DRAINED = "drained"
    """Accepts no new trajectory (an operator drained it); undraining makes it active."""
    FAILED = "failed"
    """Declared dead (missed heartbeats or reported a failure)."""
    RETIRED = "retired"
    """Stopped for a re-shard: its GPUs joined another worker (``worker.retired``)."""


class MigrationStatus(enum.StrEnum):
    REQUESTED = "requested"
    """Asked for, not yet done."""
    DONE = "done"
    """The trajectory arrived on the target worker (``Migrated``)."""


S = TypeVar("S", bound=enum.StrEnum)


class StatusType(TypeDecorator[S]):
    """A status column: stored as its value in a ``VARCHAR(16)``, read back as the member."""

    impl = String(16)
    cache_ok = True

    def __init__(self, status_type: type[S]) -> None:
        super().__init__()
        self.status_type = status_type

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else self.status_type(value).value

    def process_result_value(self, value: Any, dialect: Dialect) -> S | None:
        return None if value is None else self.status_type(value)
