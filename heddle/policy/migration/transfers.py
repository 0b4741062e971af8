"""Endpoint-exclusive scheduling of KV-cache transfers for migrations (docs/paper.md, the paper's
s.5).

The paper's transfer scheduler: pending migration requests sorted by trajectory length, longest
first; each round greedily picks requests whose source and destination are used by no chosen or
running transfer. One transfer per endpoint keeps each link at full bandwidth, and the longest
trajectories (the ones that set the makespan) move first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# The link a migration's KV transfer crosses, GPUDirect RDMA between GPUs of different servers:
# one 400 Gb/s InfiniBand NDR NIC per GPU (NVIDIA ConnectX-7 and DGX H100/H200 reference designs;
# the paper's s.5.3) moves ~50 GB/s per direction. Assumption: transfers reach line rate; NVLink
# inside one server would be ~9x faster. The simulator's and the simulated engine's default.
DEFAULT_LINK_BANDWIDTH_BYTES_S = 50e9


@dataclass(frozen=True, slots=True)
class Transfer:
    traj_id: str
    source_id: str
    target_id: str
    predicted_remaining_tokens: float = 0.0
    """Ordering key: longest first."""


def _longest_first(transfer: Transfer) -> tuple[float, str]:
    return (-transfer.predicted_remaining_tokens, transfer.traj_id)


def schedule_transfers(
    pending: Sequence[Transfer], in_flight: Iterable[Transfer] = ()
) -> list[Transfer]:
    """The transfers to start now: longest first, no endpoint used twice (counting in-flight).

    A trajectory already in flight, or pending twice, is started at most once (its longest
    entry). ``ValueError`` for a transfer whose source is its target or a NaN length.
    """
    busy: set[str] = set()
    moving: set[str] = set()
    for transfer in in_flight:
        busy.update((transfer.source_id, transfer.target_id))
        moving.add(transfer.traj_id)
    for transfer in pending:
        _check(transfer)
    chosen: list[Transfer] = []
    for transfer in sorted(pending, key=_longest_first):
        if transfer.traj_id in moving:
            continue
        if transfer.source_id in busy or transfer.target_id in busy:
            continue
        chosen.append(transfer)
        busy.update((transfer.source_id, transfer.target_id))
        moving.add(transfer.traj_id)
    return chosen


def _check(transfer: Transfer) -> None:
    if transfer.source_id == transfer.target_id:
        raise ValueError(
            f"transfer of {transfer.traj_id!r}: source and target are both {transfer.source_id!r}"
        )
    if transfer.predicted_remaining_tokens != transfer.predicted_remaining_tokens:
        raise ValueError(f"transfer of {transfer.traj_id!r}: predicted length is NaN")


class TransferScheduler:
    """Pending and in-flight transfers of one control plane; never two on one endpoint.

    ``submit`` a migration, take ``next_batch`` to start, ``finish`` (done or failed) each one.
    A newer request for a trajectory that is pending replaces the older one.
    """

    def __init__(self) -> None:
        self._pending: dict[str, Transfer] = {}
        self._in_flight: dict[str, Transfer] = {}

    @property
    def pending(self) -> list[Transfer]:
        return sorted(self._pending.values(), key=_longest_first)

    @property
    def in_flight(self) -> list[Transfer]:
        return list(self._in_flight.values())

    def submit(self, transfer: Transfer) -> None:
        _check(transfer)
        self._pending[transfer.traj_id] = transfer

    def cancel(self, traj_id: str) -> None:
        """Drop a pending request (the trajectory finished or its migration is moot)."""
        self._pending.pop(traj_id, None)

    def next_batch(self) -> list[Transfer]:
        batch = schedule_transfers(list(self._pending.values()), self._in_flight.values())
        for transfer in batch:
            del self._pending[transfer.traj_id]
            self._in_flight[transfer.traj_id] = transfer
        return batch

    def finish(self, traj_id: str) -> Transfer:
        transfer = self._in_flight.pop(traj_id, None)
        if transfer is None:
            raise ValueError(f"no transfer of {traj_id!r} is in flight")
        return transfer
