"""The event gate in the projector: the ledger folds only the events the control plane acts on.

``GatedFold`` puts every event of a batch through ``heddle.control.gate.EventGate``, the same
pure gate the control plane's deciders stand behind, in stream order, so the two accept and
refuse the same events. The gate's state lives with the rows it guards: a rollout's lease in
``rollouts.lease``, a trajectory's in ``trajectories.lease`` (JSON text, written in the
projector's transaction with the rows), so a projector that restarts, or a rebuild of one
rollout from the stream, decides exactly as before. An accepted event is folded into the rows
(``heddle.ledger.fold``); a refused one changes no row and leaves a dead-letter row with the
gate's reason (consumer ``ledger-gate``: the control plane's own dead letter of the same event
comes from the stream beside it).
"""

from __future__ import annotations

import msgspec

from heddle.control.gate import EventGate, RolloutLease
from heddle.control.leases import TrajectoryLease
from heddle.events import EventT
from heddle.events.subjects import EVENTS_STREAM, subject_for_event
from heddle.ids import derive_id
from heddle.ledger.batch_rows import BatchRows
from heddle.ledger.fold import apply
from heddle.ledger.rows import DeadLetterRow, TrajectoryKey

GATE_CONSUMER = "ledger-gate"
"""The consumer named in the ledger's own dead letters (whatever writer projects)."""

_encode = msgspec.json.Encoder().encode
_rollout_lease = msgspec.json.Decoder(RolloutLease).decode
_trajectory_lease = msgspec.json.Decoder(TrajectoryLease).decode


class RowLeases:
    """The gate's ``LeaseStore`` over one batch's rows: leases are decoded when first asked
    for and written back into their rows by ``flush``."""

    def __init__(self, rows: BatchRows) -> None:
        self._rows = rows
        self._rollouts: dict[str, RolloutLease | None] = {}
        self._trajectories: dict[TrajectoryKey, TrajectoryLease | None] = {}
        self._changed_rollouts: set[str] = set()
        self._changed_trajectories: set[TrajectoryKey] = set()

    def rollout(self, rollout_id: str) -> RolloutLease | None:
        if rollout_id not in self._rollouts:
            row = self._rows.rollouts.get(rollout_id)
            lease = _rollout_lease(row.lease) if row is not None and row.lease else None
            self._rollouts[rollout_id] = lease
        return self._rollouts[rollout_id]

    def trajectory(self, rollout_id: str, traj_id: str) -> TrajectoryLease | None:
        key = (rollout_id, traj_id)
        if key not in self._trajectories:
            row = self._rows.trajectories.get(key)
            lease = _trajectory_lease(row.lease) if row is not None and row.lease else None
            self._trajectories[key] = lease
        return self._trajectories[key]

    def save_rollout(self, rollout_id: str, lease: RolloutLease) -> None:
        self._rollouts[rollout_id] = lease
        self._changed_rollouts.add(rollout_id)

    def save_trajectory(self, rollout_id: str, traj_id: str, lease: TrajectoryLease) -> None:
        self._trajectories[(rollout_id, traj_id)] = lease
        self._changed_trajectories.add((rollout_id, traj_id))

    def flush(self) -> None:
        """Write every changed lease into its row (made if the batch made none)."""
        for rollout_id in self._changed_rollouts:
            self._rows.rollout(rollout_id).lease = _encode(self._rollouts[rollout_id]).decode()
        for key in self._changed_trajectories:
            lease = self._trajectories[key]
            self._rows.trajectory(*key).lease = _encode(lease).decode()
        self._changed_rollouts.clear()
        self._changed_trajectories.clear()


def fold_gated(rows: BatchRows, records: list[tuple[int, EventT]], stream: str) -> int:
    """Fold the records the gate accepts into ``rows`` (dead-letter rows for the others);
    how many it refused."""
    leases = RowLeases(rows)
    gate = EventGate(leases)
    num_refused = 0
    for sequence, event in records:
        verdict = gate.admit(event)
        if verdict.refusal is None:
            apply(rows, event)
            continue
        num_refused += 1
        rows.dead_letters.append(_dead_letter(event, sequence, stream, verdict.refusal.reason))
    leases.flush()
    return num_refused


def _dead_letter(event: EventT, sequence: int, stream: str, reason: str) -> DeadLetterRow:
    return DeadLetterRow(
        event_id=derive_id("deadletter", GATE_CONSUMER, stream or EVENTS_STREAM, sequence),
        rollout_id=event.rollout_id,
        consumer=GATE_CONSUMER,
        subject=subject_for_event(event),
        stream_sequence=sequence,
        reason=f"refused: {reason}"[:2000],
        recorded_at=event.occurred_at,
    )
