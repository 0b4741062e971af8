"""The worker's local trajectory table: what it hosts, in which phase, and where it sent the rest.

A ``HostedTrajectory`` joins the trajectory's event log (the durable truth, see ``trajectory_log``)
with what only this worker knows: its ``stage`` (one value: at rest, running a segment of steps,
handed over to a worker, or released), the live environment object, the priority for the next
generation, the request in the engine and a pending migration. Its phase
(``decisions.WORKER_PHASES``) is the stage's, or at rest the log's. Ownership: the agent's event
loop; the table's per-trajectory lock serialises command transitions of one trajectory (even before
it has a row) while its steps run outside the lock.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from heddle.events import MigrateOut, TrajectoryPhase, TrajectorySpec
from heddle.workers.agent.decisions import Mode, State
from heddle.workers.agent.trajectory_log import TrajectoryLog
from heddle.workers.environments import Environment, Observation


@dataclass(frozen=True, slots=True)
class CommandArrival:
    """When the command that starts a segment of steps was stored in the stream (the server's
    clock) and taken by this worker (its clock); stamped on the segment's first
    ``GenerationStarted`` (the rollout summary splits the time before the step with them)."""

    stored_at: float
    received_at: float
    issued_at: float = 0.0
    """The command's ``issued_at`` (the time of the event the control plane decided it on)."""


@dataclass(frozen=True, slots=True)
class Resting:
    """No segment runs: the trajectory waits for a tool result, ended, or waits for its next
    step (the log says which)."""


@dataclass(frozen=True, slots=True)
class Running:
    """A segment of steps (generate, step the environment, publish) runs as ``segment``."""

    segment: asyncio.Task[None]


@dataclass(frozen=True, slots=True)
class HandedOver:
    """Migrated (or, on a retiring worker, left) to ``target``: later commands go there."""

    target: str


@dataclass(frozen=True, slots=True)
class Released:
    """Given back to the control plane (a retryable failure) or dropped (a fence, a rejoin):
    the row counts as absent, a later command rebuilds it from the stream."""


HostingState = Resting | Running | HandedOver | Released
RESTING = Resting()
RELEASED = Released()


@dataclass(eq=False, slots=True)
class HostedTrajectory:
    log: TrajectoryLog
    spec: TrajectorySpec
    env: Environment
    priority: float = 0.0
    next_observation: Observation | None = None
    """What to append before the next generation (its tokens, its target length)."""
    stage: HostingState = RESTING
    request_id: str | None = None
    """The generation in the engine, while one is."""
    is_kv_lost: bool = False
    """The context is not cached on this engine (resumed without a KV transfer): the next
    generation re-prefills it and counts those tokens as recomputed."""
    num_warmed_tokens: int = 0
    """Tokens a warm-up prefilled for the next generation (reported with it, then reset)."""
    pending_migration: MigrateOut | None = None
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set whenever no segment runs (the trajectory waits for a tool, ended or left)."""

    def __post_init__(self) -> None:
        self.settled.set()

    @property
    def rollout_id(self) -> str:
        return self.log.rollout_id

    @property
    def traj_id(self) -> str:
        return self.log.traj_id

    @property
    def is_running(self) -> bool:
        return isinstance(self.stage, Running)

    @property
    def handed_to(self) -> str:
        """The worker the trajectory was handed to ("" if it was not)."""
        return self.stage.target if isinstance(self.stage, HandedOver) else ""

    @property
    def phase(self) -> TrajectoryPhase:
        """One of ``decisions.WORKER_PHASES`` (never PENDING, GENERATED or MIGRATING): the
        stage's, at rest the log's (READY for a GENERATED log)."""
        match self.stage:
            case HandedOver():
                return TrajectoryPhase.HANDED_OVER
            case Released():
                return TrajectoryPhase.ABSENT
        logged = self.log.phase
        if logged is TrajectoryPhase.DONE:
            return TrajectoryPhase.DONE
        if self.is_running:
            # The step is in progress (in the engine, or publishing around it): commands that
            # need the trajectory at rest (a tool result, a migration) wait for its end.
            return TrajectoryPhase.GENERATING
        if logged is TrajectoryPhase.IN_TOOL:
            return TrajectoryPhase.IN_TOOL
        return TrajectoryPhase.READY

    def settle(self) -> None:
        """The segment ended: at rest (unless it handed the trajectory over or gave it back)."""
        if self.is_running:
            self.stage = RESTING
        self.settled.set()


class TrajectoryTable:
    """Hosted trajectories by (rollout id, trajectory id).

    A trajectory that finished or left is kept only as a tombstone (its key and, if it was
    handed over, where it went), so duplicates are still recognised without holding its tokens.
    """

    def __init__(self, max_tombstones: int = 100_000) -> None:
        self._rows: dict[tuple[str, str], HostedTrajectory] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._tombstones: OrderedDict[tuple[str, str], str] = OrderedDict()
        """Finished ("") or handed over (the worker it went to); oldest first."""
        self.max_tombstones = max_tombstones

    def lock_for(self, rollout_id: str, traj_id: str) -> asyncio.Lock:
        """The lock serialising commands of one trajectory (created on first use)."""
        return self._locks.setdefault((rollout_id, traj_id), asyncio.Lock())

    def get(self, rollout_id: str, traj_id: str) -> HostedTrajectory | None:
        """The live row (None for absent, released or tombstoned trajectories)."""
        row = self._rows.get((rollout_id, traj_id))
        return None if row is None or isinstance(row.stage, Released) else row

    def put(self, hosted: HostedTrajectory) -> None:
        key = (hosted.rollout_id, hosted.traj_id)
        self._tombstones.pop(key, None)
        self._rows[key] = hosted

    def state_of(
        self, rollout_id: str, traj_id: str, mode: Mode, *, is_redelivered: bool = False
    ) -> tuple[HostedTrajectory | None, State]:
        """The trajectory's live row, and the state ``decisions.decide`` reads for a command
        about it on a worker in ``mode``."""
        hosted = self.get(rollout_id, traj_id)
        if hosted is None:
            phase = self.phase_of(rollout_id, traj_id)
            return None, State(mode, phase=phase, is_redelivered=is_redelivered)
        log = hosted.log
        state = State(
            mode,
            phase=hosted.phase,
            current_step=log.current_step,
            epoch=log.epoch,
            is_redelivered=is_redelivered,
        )
        return hosted, state

    def phase_of(self, rollout_id: str, traj_id: str) -> TrajectoryPhase:
        hosted = self.get(rollout_id, traj_id)
        if hosted is not None:
            return hosted.phase
        handed_to = self._tombstones.get((rollout_id, traj_id))
        if handed_to is None:
            return TrajectoryPhase.ABSENT
        return TrajectoryPhase.HANDED_OVER if handed_to else TrajectoryPhase.DONE

    def handed_to(self, rollout_id: str, traj_id: str) -> str:
        """The worker a handed-over trajectory went to ("" if it was not handed over)."""
        hosted = self.get(rollout_id, traj_id)
        if hosted is not None:
            return hosted.handed_to
        return self._tombstones.get((rollout_id, traj_id), "")

    def __iter__(self) -> Iterator[HostedTrajectory]:
        return iter(list(self._rows.values()))

    def hosted(self) -> list[HostedTrajectory]:
        """Trajectories this worker is responsible for (not finished, not handed over)."""
        return [row for row in self._rows.values() if row.phase.is_hosted]

    def generating(self) -> list[HostedTrajectory]:
        return [row for row in self._rows.values() if row.request_id is not None]

    def bury(self, rollout_id: str, traj_id: str, handed_to: str = "") -> None:
        """Record, without a row, that a trajectory finished or lives on ``handed_to``."""
        key = (rollout_id, traj_id)
        if key not in self._rows:
            self._add_tombstone(key, handed_to)

    def compact(self, rollout_id: str, traj_id: str) -> None:
        """Turn the trajectory's row into a tombstone once it is at rest and finished or gone
        (a released row is forgotten: a later command rebuilds it from the stream)."""
        key = (rollout_id, traj_id)
        row = self._rows.get(key)
        lock = self._locks.get(key)
        if row is None or row.is_running or (lock is not None and lock.locked()):
            return
        if isinstance(row.stage, Released):
            del self._rows[key]
        elif row.phase in (TrajectoryPhase.DONE, TrajectoryPhase.HANDED_OVER):
            del self._rows[key]
            self._add_tombstone(key, row.handed_to)
        else:
            return
        self._locks.pop(key, None)

    def _add_tombstone(self, key: tuple[str, str], handed_to: str) -> None:
        self._tombstones[key] = handed_to
        self._tombstones.move_to_end(key)
        while len(self._tombstones) > self.max_tombstones:
            self._tombstones.popitem(last=False)
