"""The ledger's fold of operator events (``heddle.events.operator``): one ``operator_actions``
row per request, and nothing else, except that an undrain turns a known drained worker active.
An operator event never creates a row of its target (a mistyped id leaves no phantom)."""

from __future__ import annotations

from heddle.events import OperatorEventT, TrajectoryReprioritizeRequested, WorkerUndrainRequested
from heddle.ledger.batch_rows import BatchRows
from heddle.ledger.rows import OperatorActionRow
from heddle.ledger.statuses import WorkerStatus


def apply_operator(rows: BatchRows, event: OperatorEventT) -> None:
    rows.operator_actions.append(_operator_action_row(event))
    if isinstance(event, WorkerUndrainRequested):
        undrained = rows.workers.get(event.worker_id)  # loaded only if it exists
        if undrained is not None and undrained.status is WorkerStatus.DRAINED:
            undrained.status = WorkerStatus.ACTIVE


def _operator_action_row(event: OperatorEventT) -> OperatorActionRow:
    priority, pin = None, False
    if isinstance(event, TrajectoryReprioritizeRequested):
        priority, pin = event.priority, event.pin
    return OperatorActionRow(
        event_id=event.event_id,
        kind=str(type(event).__struct_config__.tag),
        rollout_id=event.rollout_id,
        traj_id=getattr(event, "traj_id", ""),
        worker_id=getattr(event, "worker_id", ""),
        operator=event.operator,
        reason=event.reason,
        priority=priority,
        pin=pin,
        requested_at=event.occurred_at,
    )
