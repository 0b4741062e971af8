"""The transfer decider's incremental starts equal a full ``schedule_transfers`` pass after every
event (the brute-force reference below), on random event sequences."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.control.decider import Output
from heddle.control.transfer import TransferDecider, _Request, _transfer_id
from heddle.events import (
    Completed,
    Event,
    Migrated,
    MigrateOut,
    MigrationRequested,
    ToolCalled,
    ToolReturned,
)
from heddle.ids import derive_id
from heddle.policy.migration.transfers import Transfer, schedule_transfers

WORKERS = ["w0", "w1", "w2", "w3"]
TRAJECTORIES = [f"t{i}" for i in range(6)]


class Reference:
    """The decider as first written: a full scheduling pass after every relevant event."""

    def __init__(self) -> None:
        self.pending: dict[tuple[str, str], _Request] = {}
        self.in_flight: dict[tuple[str, str], _Request] = {}
        self.in_gap: set[tuple[str, str]] = set()

    def decide(self, event: Event) -> list[Output]:
        key = (event.rollout_id, getattr(event, "traj_id", ""))
        match event:
            case MigrationRequested():
                if key in self.in_flight:
                    return []
                transfer = Transfer(
                    _transfer_id(key),
                    event.source_worker_id,
                    event.target_worker_id,
                    event.predicted_remaining_tokens,
                )
                self.pending[key] = _Request(
                    transfer, derive_id(event.event_id, "migration"), event.traj_id
                )
            case ToolCalled():
                self.in_gap.add(key)
            case ToolReturned():
                self.in_gap.discard(key)
                return []
            case Migrated():
                self.in_flight.pop(key, None)
            case Completed():
                self.in_gap.discard(key)
                self.pending.pop(key, None)
                self.in_flight.pop(key, None)
        ready = {r.transfer.traj_id: k for k, r in self.pending.items() if k in self.in_gap}
        pending = [self.pending[k].transfer for k in ready.values()]
        started: list[Output] = []
        in_flight = [r.transfer for r in self.in_flight.values()]
        for transfer in schedule_transfers(pending, in_flight):
            key = ready[transfer.traj_id]
            request = self.pending.pop(key)
            self.in_flight[key] = request
            started.append(
                MigrateOut(
                    command_id=derive_id(request.migration_id, "migrate_out"),
                    rollout_id=key[0],
                    issued_at=event.occurred_at,
                    worker_id=transfer.source_id,
                    traj_id=request.traj_id,
                    target_worker_id=transfer.target_id,
                    migration_id=request.migration_id,
                )
            )
        return started


def event_of(kind: int, traj: str, source: int, shift: int, length: float, n: int) -> Event:
    common = {"rollout_id": "r", "traj_id": traj, "occurred_at": float(n)}
    if kind == 0:
        return MigrationRequested(
            event_id=f"m{n}",
            source_worker_id=WORKERS[source],
            target_worker_id=WORKERS[(source + shift) % len(WORKERS)],
            predicted_remaining_tokens=length,
            **common,  # type: ignore[arg-type]
        )
    if kind == 1:
        return ToolCalled(
            event_id=f"c{n}",
            step=0,
            worker_id="w0",
            call_id="x",
            tool="t",
            **common,  # type: ignore[arg-type]
        )
    if kind == 2:
        return ToolReturned(
            event_id=f"r{n}",
            step=0,
            call_id="x",
            tool="t",
            status="ok",
            **common,  # type: ignore[arg-type]
        )
    if kind == 3:
        return Migrated(
            event_id=f"g{n}",
            source_worker_id="w0",
            target_worker_id="w1",
            **common,  # type: ignore[arg-type]
        )
    return Completed(event_id=f"d{n}", num_steps=1, **common)  # type: ignore[arg-type]


steps = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.sampled_from(TRAJECTORIES),
        st.integers(0, len(WORKERS) - 1),
        st.integers(1, len(WORKERS) - 1),
        st.floats(0, 1e4),
    ),
    max_size=80,
)


@settings(max_examples=300)
@given(steps=steps)
def test_incremental_starts_equal_a_full_pass_after_every_event(
    steps: list[tuple[int, str, int, int, float]],
) -> None:
    incremental, reference = TransferDecider(), Reference()
    for n, (kind, traj, source, shift, length) in enumerate(steps):
        event = event_of(kind, traj, source, shift, length, n)
        assert incremental.decide(event) == reference.decide(event), (n, event)
    assert incremental.snapshot() == (
        reference.pending,
        reference.in_flight,
        frozenset(reference.in_gap),
    )
