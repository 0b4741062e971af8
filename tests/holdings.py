"""What each worker holds of a running rollout, read from the stream: the kill tests choose the
worker whose death costs the most."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from heddle.bus import Bus, ReplayQuery
from heddle.config import Settings
from heddle.events import Completed, Generated, Migrated, TrajectoryPlaced
from heddle.events.subjects import rollout_filter
from heddle.ids import trajectory_id
from heddle.traces import TraceTrajectory


async def holdings(
    settings: Settings, rollout_id: str, trace: Sequence[TraceTrajectory], min_steps_left: int
) -> Counter[str]:
    """Unfinished trajectories per worker, from the rollout's placements and moves so far,
    counting only those with at least ``min_steps_left`` generations to go of ``trace`` (the
    rollout's, in submission order), so that none can finish between this read and a kill."""
    steps = {trajectory_id(i): len(t.steps) for i, t in enumerate(trace)}
    generated: Counter[str] = Counter()
    where: dict[str, str] = {}
    async with Bus(settings) as bus:
        query = ReplayQuery(filter_subjects=tuple(rollout_filter(rollout_id)))
        async for record in bus.replay_events(query):
            match record.message:
                case TrajectoryPlaced() as placed:
                    where[placed.traj_id] = placed.worker_id
                case Migrated() as migrated:
                    where[migrated.traj_id] = migrated.target_worker_id
                case Generated() as step:
                    generated[step.traj_id] += 1
                case Completed() as completed:
                    where.pop(completed.traj_id, None)
    return Counter(w for t, w in where.items() if steps[t] - generated[t] >= min_steps_left)
