"""The worker's local trajectory table: what it hosts, in which phase, and where it sent the rest.

A ``HostedTrajectory`` joins the trajectory's event log (the durable truth, see ``history``) with
what only this worker knows: the live environment object, the priority for the next generation,
the request in the engine, a pending migration, and where the trajectory went if it was handed
over. Ownership: the agent's event loop; the table's per-trajectory lock serialises command
transitions of one trajectory (even before it has a row) while its steps run outside the lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field

from heddle.events import MigrateOut, TrajectorySpec
from heddle.workers.agent.decisions import Phase
from heddle.workers.agent.history import StepPhase, TrajectoryLog
from heddle.workers.environments import Environment, Observation


@dataclass(eq=False, slots=True)
class HostedTrajectory:
    log: TrajectoryLog
    spec: TrajectorySpec
    env: Environment
    priority: float = 0.0
    next_observation: Observation | None = None
    """What to append before the next generation (its tokens, its target length)."""
    request_id: str | None = None
    """The generation in the engine, while one is."""
    is_running: bool = False
    """A segment of steps (generate, step the environment, publish) is in progress."""
    is_kv_lost: bool = False
    """The context is not cached on this engine (resumed without a KV transfer): the next
    generation re-prefills it and counts those tokens as recomputed."""
    pending_migration: MigrateOut | None = None
    handed_to: str = ""
    is_released: bool = False
    """Given back to the control plane (a retryable failure): the row counts as absent."""
    segment: asyncio.Task[None] | None = None
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
    def phase(self) -> Phase:
        if self.handed_to:
            return Phase.HANDED_OVER
        step_phase = self.log.phase
        if step_phase is StepPhase.FINISHED:
            return Phase.DONE
        if self.is_running:
            # The step is in progress (in the engine, or publishing around it): commands that
            # need the trajectory at rest (a tool result, a migration) wait for its end.
            return Phase.GENERATING
        if step_phase is StepPhase.IN_TOOL:
            return Phase.IN_TOOL
        return Phase.READY


class TrajectoryTable:
    """Hosted trajectories by (rollout id, trajectory id)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], HostedTrajectory] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def lock_for(self, rollout_id: str, traj_id: str) -> asyncio.Lock:
        """The lock serialising commands of one trajectory (created on first use)."""
        return self._locks.setdefault((rollout_id, traj_id), asyncio.Lock())

    def get(self, rollout_id: str, traj_id: str) -> HostedTrajectory | None:
        return self._rows.get((rollout_id, traj_id))

    def put(self, hosted: HostedTrajectory) -> None:
        self._rows[(hosted.rollout_id, hosted.traj_id)] = hosted

    def phase_of(self, rollout_id: str, traj_id: str) -> Phase:
        hosted = self.get(rollout_id, traj_id)
        if hosted is None or hosted.is_released:
            return Phase.ABSENT
        return hosted.phase

    def __iter__(self) -> Iterator[HostedTrajectory]:
        return iter(list(self._rows.values()))

    def hosted(self) -> list[HostedTrajectory]:
        """Trajectories this worker is responsible for (not finished, not handed over)."""
        return [row for row in self._rows.values() if row.phase.is_hosted and not row.is_released]

    def generating(self) -> list[HostedTrajectory]:
        return [row for row in self._rows.values() if row.request_id is not None]

    def forget_finished(self, keep: int) -> None:
        """Drop all but the ``keep`` most recent finished rows (their ids still de-duplicate
        through the stream: a late command rebuilds and finds the trajectory finished)."""
        finished = [key for key, row in self._rows.items() if row.phase is Phase.DONE]
        for key in finished[: max(0, len(finished) - keep)]:
            del self._rows[key]
            lock = self._locks.get(key)
            if lock is not None and not lock.locked():
                del self._locks[key]
