"""The transfer decider: schedules migrations' KV transfers, endpoint-exclusive, longest first.

Consumes ``MigrationRequested`` (queue it; a newer request for the same trajectory replaces a
pending one; its KV moves when the engines can move KV and the request does not call it
stale), ``ToolCalled`` / ``ToolReturned`` (a trajectory can move only in a tool gap, when it
holds no GPU: paper s.5.3), ``Migrated`` (its endpoints are free again), ``Completed`` / ``Failed``
(drop its request; free its endpoints if it was moving). After each event it starts every
pending transfer that ``heddle.policy.migration.transfers.schedule_transfers`` allows among
trajectories in a gap, emitting one ``MigrateOut`` command to each source worker.
"""

from __future__ import annotations

from dataclasses import dataclass

from heddle.control.decider import Output
from heddle.events import (
    Completed,
    Event,
    Failed,
    Migrated,
    MigrateOut,
    MigrationRequested,
    ToolCalled,
    ToolReturned,
)
from heddle.ids import derive_id
from heddle.policy.migration.transfers import Transfer, schedule_transfers


@dataclass(frozen=True, slots=True)
class _Request:
    transfer: Transfer
    """Its ``traj_id`` is ``_transfer_id(key)``: unique across rollouts."""
    migration_id: str
    traj_id: str
    transfer_kv: bool = True
    target_epoch: int = 0


def _transfer_id(key: tuple[str, str]) -> str:
    return f"{key[0]}/{key[1]}"


class TransferDecider:
    """State: pending and in-flight transfers, and which trajectories are in a tool gap."""

    name = "transfer"
    handles: frozenset[type[Event]] = frozenset(
        {MigrationRequested, ToolCalled, ToolReturned, Migrated, Completed, Failed}
    )

    def __init__(self, *, transfer_kv: bool = True) -> None:
        self.transfer_kv = transfer_kv
        # Keys are (rollout id, trajectory id): trajectory ids repeat across rollouts, while
        # endpoints (workers) are shared by all of them.
        self._pending: dict[tuple[str, str], _Request] = {}
        self._in_flight: dict[tuple[str, str], _Request] = {}
        self._in_gap: set[tuple[str, str]] = set()

    def decide(self, event: Event) -> list[Output]:
        key = (event.rollout_id, getattr(event, "traj_id", ""))
        match event:
            case MigrationRequested():
                if key in self._in_flight:
                    return []
                transfer = Transfer(
                    _transfer_id(key),
                    event.source_worker_id,
                    event.target_worker_id,
                    event.predicted_remaining_tokens,
                )
                migration_id = derive_id(event.event_id, "migration")
                transfer_kv = self.transfer_kv and event.transfer_kv
                self._pending[key] = _Request(
                    transfer, migration_id, event.traj_id, transfer_kv, event.target_epoch
                )
                return self._start(event, only=key) if key in self._in_gap else []
            case ToolCalled():
                self._in_gap.add(key)
                return self._start(event, only=key) if key in self._pending else []
            case ToolReturned():
                self._in_gap.discard(key)
            case Migrated():
                if self._in_flight.pop(key, None) is not None:
                    return self._start(event)
            case Completed() | Failed():
                self._in_gap.discard(key)
                self._pending.pop(key, None)
                if self._in_flight.pop(key, None) is not None:
                    return self._start(event)
        return []

    def _start(self, event: Event, only: tuple[str, str] | None = None) -> list[Output]:
        """Start what ``schedule_transfers`` allows. Every pending request in a gap that is not
        started is blocked by an in-flight endpoint, and stays blocked until a transfer ends;
        so a full pass is needed only when one ends, and a request that just became ready
        (``only``) is the only one that can start otherwise (same result, O(1) instead of
        sorting every waiting request at each tool call)."""
        if not self._pending:
            return []
        keys = [only] if only is not None else [k for k in self._pending if k in self._in_gap]
        ready = {self._pending[key].transfer.traj_id: key for key in keys}
        if not ready:
            return []
        in_flight = [request.transfer for request in self._in_flight.values()]
        pending = [self._pending[key].transfer for key in ready.values()]
        outputs: list[Output] = []
        for transfer in schedule_transfers(pending, in_flight):
            key = ready[transfer.traj_id]
            request = self._pending.pop(key)
            self._in_flight[key] = request
            outputs.append(
                MigrateOut(
                    command_id=derive_id(request.migration_id, "migrate_out"),
                    rollout_id=key[0],
                    issued_at=event.occurred_at,
                    worker_id=transfer.source_id,
                    traj_id=request.traj_id,
                    target_worker_id=transfer.target_id,
                    migration_id=request.migration_id,
                    transfer_kv=request.transfer_kv,
                    target_epoch=request.target_epoch,
                )
            )
        return outputs

    def snapshot(
        self,
    ) -> tuple[
        dict[tuple[str, str], _Request], dict[tuple[str, str], _Request], frozenset[tuple[str, str]]
    ]:
        """The state, as a comparable value (replay tests)."""
        return dict(self._pending), dict(self._in_flight), frozenset(self._in_gap)
