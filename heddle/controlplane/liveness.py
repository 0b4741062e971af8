"""Worker liveness: a worker whose heartbeats stop is declared failed by the control plane.

``WorkerLiveness`` is a pure fold over worker and placement events plus a check at a given
``now``: a worker that registered (or heartbeat) and has not been heard from for ``timeout_s``
gets a ``WorkerFailed`` listing the trajectories placed on it, which the placement deciders
re-place on live workers. "Heard from" is the latest ``occurred_at`` of its registration,
heartbeats or drain (the worker's clock: workers and control plane must agree on time within a
fraction of the timeout); a worker restarted under the same id comes back with its new
registration.

Heartbeats arrive on core NATS (``heard``), not from the stream (``heddle.bus.telemetry`` says
why); ``WorkerHeartbeat`` events of older streams still fold in. A control plane that (re)starts
has heard none of the heartbeats sent while it was down, so ``start_listening(now)`` counts every
worker as heard from then: a worker that went silent while the control plane was down is failed
one timeout after the restart, and a live one never is. The same holds when the control plane's
own connection comes back after a loss (a nats-server restart): heartbeats sent meanwhile never
reached it, so ``start_listening`` is called again with the reconnection time.

A drained worker (``WorkerDrained``) is never declared failed for its silence: it stays
registered as drained until an operator undrains it (``WorkerUndrainRequested``: it is watched
again from then on) or it registers again. A worker retired for a re-shard (``WorkerRetired``)
is gone on purpose: it is no longer watched (its trajectories moved to its successor).

A cancelled rollout (``RolloutCancelled``) has its trajectories aborted where they are placed:
the fold answers it with one ``Abort`` command per trajectory it knows on a worker.

The ``WorkerFailed`` id is the one the worker agent uses for its own engine failures
(``<worker>:<incarnation>:failed``), so a worker that reports its failure and a control plane
that notices it store one event. Every ``WorkerFailed`` of a known incarnation is answered with a
``Rejoin`` command to that incarnation: a worker that was only paused (or cut off) and runs on
learns that what it held went elsewhere, drops it and registers afresh, instead of staying a
zombie that nothing is placed on again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.control import Output
from heddle.events import (
    Abort,
    Completed,
    Event,
    Failed,
    Migrated,
    Rejoin,
    RolloutCancelled,
    TrajectoryPlaced,
    WorkerDrained,
    WorkerEvent,
    WorkerFailed,
    WorkerHeartbeat,
    WorkerRegistered,
    WorkerRetired,
    WorkerUndrainRequested,
)
from heddle.ids import derive_id

LIVENESS_SLOT = "liveness"


@dataclass(slots=True)
class _Worker:
    incarnation: str
    last_seen_s: float
    is_alive: bool = True
    is_drained: bool = False
    trajectories: set[tuple[str, str]] = field(default_factory=set)
    heartbeat: WorkerHeartbeat | None = None
    """The latest heartbeat (its load figures), for status."""


class WorkerLiveness:
    """State: every worker's last sign of life and the trajectories placed on it."""

    slot = LIVENESS_SLOT
    handles: frozenset[type[Event]] = frozenset(
        {
            WorkerRegistered,
            WorkerHeartbeat,
            WorkerDrained,
            WorkerFailed,
            WorkerRetired,
            TrajectoryPlaced,
            Migrated,
            Completed,
            Failed,
            RolloutCancelled,
            WorkerUndrainRequested,
        }
    )

    def __init__(self, timeout_s: float) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = timeout_s
        self._workers: dict[str, _Worker] = {}
        self._placed_on: dict[tuple[str, str], str] = {}
        self._listening_since_s = float("-inf")

    def start_listening(self, now_s: float) -> None:
        """Heartbeats are received from ``now_s`` on: silence counts from then at the earliest
        (an earlier time than the latest given changes nothing)."""
        self._listening_since_s = max(self._listening_since_s, now_s)

    def heard(self, heartbeat: WorkerHeartbeat) -> None:
        """A heartbeat received live (core NATS): the worker was alive at its ``occurred_at``."""
        self._seen(heartbeat)
        worker = self._workers[heartbeat.worker_id]
        latest = worker.heartbeat
        if latest is None or heartbeat.occurred_at >= latest.occurred_at:
            worker.heartbeat = heartbeat

    def latest_heartbeats(self) -> dict[str, WorkerHeartbeat]:
        """Each worker's latest heartbeat heard live (workers never heard from are absent)."""
        return {w: worker.heartbeat for w, worker in self._workers.items() if worker.heartbeat}

    def decide(self, event: Event) -> list[Output]:
        """Fold one event in; a cancellation calls for its aborts, a failure for a ``Rejoin``
        (failures themselves come from ``check``)."""
        match event:
            case RolloutCancelled():
                return self._abort(event)
            case WorkerRegistered():
                worker = self._workers.get(event.worker_id)
                if worker is None or event.incarnation != worker.incarnation:
                    held = worker.trajectories if worker is not None else set()
                    # Heartbeats heard while the stream is replayed (a control plane that
                    # restarts or rebuilds its deciders) come before the replayed registration
                    # that they follow: they still count.
                    seen_s = max(event.occurred_at, worker.last_seen_s if worker else 0.0)
                    beat = worker.heartbeat if worker is not None else None
                    if beat is not None and beat.occurred_at < event.occurred_at:
                        beat = None  # an earlier incarnation's
                    self._workers[event.worker_id] = _Worker(
                        event.incarnation, seen_s, trajectories=held, heartbeat=beat
                    )
                else:
                    self._seen(event)
            case WorkerHeartbeat():
                self._seen(event)
            case WorkerDrained():
                self._seen(event)
                self._workers[event.worker_id].is_drained = True
            case WorkerUndrainRequested():
                undrained = self._workers.get(event.worker_id)
                if undrained is not None and undrained.is_drained:
                    undrained.is_drained = False
                    self._seen(event)  # silence counts from the undrain on
            case WorkerFailed():
                return self._failed(event)
            case WorkerRetired():
                retired = self._workers.get(event.worker_id)
                if retired is not None:
                    retired.is_alive = False  # gone on purpose: no Rejoin
            case TrajectoryPlaced():
                self._move((event.rollout_id, event.traj_id), event.worker_id)
            case Migrated():
                self._move((event.rollout_id, event.traj_id), event.target_worker_id)
            case Completed() | Failed():
                self._move((event.rollout_id, event.traj_id), None)
        return []

    def check(self, now_s: float) -> list[WorkerFailed]:
        """``WorkerFailed`` for every live worker silent for longer than the timeout (each
        is then considered failed until it registers again)."""
        failures: list[WorkerFailed] = []
        for worker_id, worker in self._workers.items():
            silent_s = now_s - max(worker.last_seen_s, self._listening_since_s)
            if not worker.is_alive or worker.is_drained or silent_s <= self.timeout_s:
                continue
            worker.is_alive = False
            failures.append(
                WorkerFailed(
                    event_id=derive_id(worker_id, worker.incarnation or None, "failed"),
                    occurred_at=now_s,
                    worker_id=worker_id,
                    reason=f"no heartbeat for {silent_s:.1f} s (timeout {self.timeout_s:g} s)",
                    trajectory_ids=sorted(traj for _, traj in worker.trajectories),
                    incarnation=worker.incarnation,
                )
            )
        return failures

    def _failed(self, event: WorkerFailed) -> list[Output]:
        """The worker's incarnation is failed; tell it to rejoin, should it still run."""
        worker = self._workers.get(event.worker_id)
        incarnation = event.incarnation
        if worker is not None:
            incarnation = incarnation or worker.incarnation
            if incarnation == worker.incarnation:
                worker.is_alive = False
        if not incarnation:
            return []
        rejoin = Rejoin(
            command_id=derive_id(event.worker_id, incarnation, "rejoin"),
            issued_at=event.occurred_at,
            worker_id=event.worker_id,
            incarnation=incarnation,
            reason=event.reason,
        )
        return [rejoin]

    def _abort(self, event: RolloutCancelled) -> list[Output]:
        keys = [key for key in self._placed_on if key[0] == event.rollout_id]
        aborts: list[Output] = []
        for key in keys:
            worker_id = self._placed_on[key]
            aborts.append(
                Abort(
                    command_id=derive_id(key[0], key[1], "cancelled", "abort"),
                    rollout_id=key[0],
                    issued_at=event.occurred_at,
                    worker_id=worker_id,
                    traj_id=key[1],
                    reason=event.reason or "rollout cancelled",
                )
            )
            self._move(key, None)
        return aborts

    def live_workers(self) -> list[str]:
        """Workers not declared failed (drained ones included)."""
        return [worker_id for worker_id, worker in self._workers.items() if worker.is_alive]

    def drained_workers(self) -> list[str]:
        return [worker_id for worker_id, w in self._workers.items() if w.is_alive and w.is_drained]

    def _seen(self, event: WorkerEvent) -> None:
        worker = self._workers.get(event.worker_id)
        if worker is None:
            worker = self._workers[event.worker_id] = _Worker("", event.occurred_at)
        worker.last_seen_s = max(worker.last_seen_s, event.occurred_at)

    def _move(self, key: tuple[str, str], worker_id: str | None) -> None:
        previous = self._placed_on.pop(key, None)
        if previous is not None and previous in self._workers:
            self._workers[previous].trajectories.discard(key)
        if worker_id is None:
            return
        self._placed_on[key] = worker_id
        worker = self._workers.get(worker_id)
        if worker is not None:
            worker.trajectories.add(key)
