"""A rollout's figures, folded from its events (the stream is the source of truth).

``summarize_rollout(events)`` is pure: feed it a rollout's events in stream order
(``rollout_summary`` reads them from the stream; a recorded list works the same). Times:

- ``makespan_s`` is in MODEL seconds: wall seconds from the submission to the last trajectory's
  end times the rollout's ``time_scale`` (sim engines run faster than real time), the unit of
  ``heddle sim``; ``wall_s`` is the same span on the wall clock;
- the slowest trajectory's breakdown, from its submission to its end: queue, prefill, decode,
  tool and migration are what its worker reported in ``Completed.timings``, also model seconds;
  the rest of its time is split into admission, held, weights, control, messaging, tool
  queueing and the workers' lag from its events' timestamps (``heddle.rollout.breakdown``),
  leaving ``other_s`` for what no timestamp explains;
- ``lag``: how far the run fell behind its time scale (``LagReport``), with a warning above
  ``LAG_WARNING_FRACTION`` (both in ``heddle.rollout.slowest``): a makespan measured behind the
  clock is not the policy's.

Re-placements after a worker failure are counted with the tokens the re-placed trajectories had
to prefill again (their KV stayed on the dead worker): ``replacement_recomputed_tokens``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from heddle.bus import Bus, ReplayQuery
from heddle.control.gate import EventGate
from heddle.events import (
    Completed,
    DeadLettered,
    Event,
    Failed,
    Generated,
    GenerationStarted,
    Migrated,
    Preempted,
    RolloutCancelled,
    RolloutFinished,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectoryPlaced,
    TrajectorySubmitted,
)
from heddle.events.subjects import CONTROL_PLANE_ROLE, deadletter_subject, rollout_filter
from heddle.rollout.breakdown import TrajectoryTimeline, split_time
from heddle.rollout.slowest import LagReport, SlowestTrajectory, lag_report, slowest_trajectory

_TIMED = (TrajectorySubmitted, GenerationStarted, Generated, ToolCalled, ToolReturned, Migrated)
"""The kinds whose timestamps ``heddle.rollout.breakdown`` reads."""


class RolloutSummary(msgspec.Struct, frozen=True, kw_only=True):
    rollout_id: str
    policy: str
    source: str
    time_scale: float
    num_trajectories: int
    num_completed: int
    num_failed: int
    is_finished: bool
    """Every trajectory completed or failed (``RolloutFinished`` seen, or all counted)."""
    is_cancelled: bool
    makespan_s: float
    """Model seconds (wall x time_scale) from submission to the last trajectory's end."""
    wall_s: float
    output_tokens: int
    throughput_tok_s: float
    """Output tokens per model second of makespan."""
    events: int
    num_preemptions: int
    num_migrations: int
    num_replacements: int
    """Trajectories re-placed after their worker failed (counted per re-placement)."""
    recomputed_tokens: int
    """Tokens prefilled again (preemption without KV, re-placement, re-routing)."""
    replacement_recomputed_tokens: int
    """... of which by trajectories that were re-placed after a worker failure."""
    migration_recomputed_tokens: int = 0
    """... of which by the first step after a migration without KV transfer: the re-prefill
    that the target's warm-up during the tool gap did not hide (evicted before the step, or
    no warm-up)."""
    warmed_up_tokens: int = 0
    """Tokens migration targets prefilled ahead, during the tool gap (hidden re-prefill)."""
    slowest: SlowestTrajectory | None
    workers: list[str]
    lag: LagReport = LagReport()


@dataclass(slots=True)
class _Fold:
    rollout_id: str
    submitted: RolloutSubmitted | None = None
    completed: dict[str, Completed] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    replaced: set[str] = field(default_factory=set)
    migrated: set[str] = field(default_factory=set)
    """Trajectories migrated whose next generation has not been seen yet."""
    migration_recomputed_tokens: int = 0
    warmed_up_tokens: int = 0
    recomputed_by_traj: dict[str, int] = field(default_factory=dict)
    num_events: int = 0
    num_preemptions: int = 0
    num_migrations: int = 0
    num_replacements: int = 0
    is_finished: bool = False
    is_cancelled: bool = False
    timelines: dict[str, TrajectoryTimeline] = field(default_factory=dict)

    def add(self, event: Event, stored_at: float = 0.0) -> None:
        self.num_events += 1
        traj_id = getattr(event, "traj_id", None)
        if isinstance(event, _TIMED) and isinstance(traj_id, str):
            timeline = self.timelines.get(traj_id)
            if timeline is None:
                timeline = self.timelines[traj_id] = TrajectoryTimeline()
            timeline.add(event, stored_at)
        match event:
            case RolloutSubmitted():
                self.submitted = self.submitted or event
            case Completed():
                self.completed.setdefault(event.traj_id, event)
                self.failed.discard(event.traj_id)
            case Failed() if event.is_final and event.traj_id not in self.completed:
                self.failed.add(event.traj_id)
            case Generated():
                self._generated(event)
            case Preempted():
                self.num_preemptions += 1
            case Migrated():
                self.num_migrations += 1
                if not event.kv_transferred:
                    self.migrated.add(event.traj_id)
            case TrajectoryPlaced() if event.reason == "replacement":
                self.num_replacements += 1
                self.replaced.add(event.traj_id)
            case RolloutFinished():
                self.is_finished = True
            case RolloutCancelled():
                self.is_cancelled = True

    def _generated(self, event: Generated) -> None:
        key = event.traj_id
        self.recomputed_by_traj[key] = (
            self.recomputed_by_traj.get(key, 0) + event.num_recomputed_tokens
        )
        self.warmed_up_tokens += event.num_warmed_tokens
        if key in self.migrated:
            self.migrated.discard(key)
            self.migration_recomputed_tokens += event.num_recomputed_tokens


def summarize_rollout(
    rollout_id: str, events: Iterable[Event], stored_at: Iterable[float] = ()
) -> RolloutSummary:
    """The summary of one rollout from its events in stream order; ``stored_at``: when the
    stream stored each (the same order; missing ones count as unknown)."""
    fold = _Fold(rollout_id)
    stamps = iter(stored_at)
    for event in events:
        fold.add(event, next(stamps, 0.0))
    return _build(fold)


def _build(fold: _Fold) -> RolloutSummary:
    submitted = fold.submitted
    scale = submitted.time_scale if submitted is not None else 1.0
    start = submitted.occurred_at if submitted is not None else 0.0
    ended = [c.occurred_at for c in fold.completed.values()]
    wall_s = max(0.0, max(ended) - start) if ended and submitted is not None else 0.0
    makespan_s = wall_s * scale
    output_tokens = sum(c.num_output_tokens for c in fold.completed.values())
    num_trajectories = submitted.num_trajectories if submitted is not None else 0
    num_ended = len(fold.completed) + len(fold.failed)
    workers = sorted({w for c in fold.completed.values() for w in c.worker_history})
    splits = {
        traj_id: split_time(fold.timelines.get(traj_id, TrajectoryTimeline()), c.occurred_at, scale)
        for traj_id, c in fold.completed.items()
    }
    slowest = slowest_trajectory(fold.completed, splits, start, scale)
    return RolloutSummary(
        rollout_id=fold.rollout_id,
        policy=submitted.policy if submitted is not None else "",
        source=submitted.source if submitted is not None else "",
        time_scale=scale,
        num_trajectories=num_trajectories,
        num_completed=len(fold.completed),
        num_failed=len(fold.failed),
        is_finished=fold.is_finished or (num_trajectories > 0 and num_ended >= num_trajectories),
        is_cancelled=fold.is_cancelled,
        makespan_s=makespan_s,
        wall_s=wall_s,
        output_tokens=output_tokens,
        throughput_tok_s=output_tokens / makespan_s if makespan_s > 0 else 0.0,
        events=fold.num_events,
        num_preemptions=fold.num_preemptions,
        num_migrations=fold.num_migrations,
        num_replacements=fold.num_replacements,
        recomputed_tokens=sum(fold.recomputed_by_traj.values()),
        replacement_recomputed_tokens=sum(
            fold.recomputed_by_traj.get(traj_id, 0) for traj_id in fold.replaced
        ),
        migration_recomputed_tokens=fold.migration_recomputed_tokens,
        warmed_up_tokens=fold.warmed_up_tokens,
        slowest=slowest,
        workers=workers,
        lag=lag_report(fold.completed, splits, slowest, fold.submitted),
    )


async def rollout_summary(bus: Bus, rollout_id: str) -> RolloutSummary:
    """Read the rollout's events from the stream and summarise those the event gate accepts
    (``heddle.control.gate``: as the control plane and the ledger, so a forged or stale event
    changes no figure). The gate reads the control plane's dead letters too: a dead-lettered
    submission's slot ends with the control plane's failure."""
    subjects = (*rollout_filter(rollout_id), deadletter_subject(CONTROL_PLANE_ROLE))
    query = ReplayQuery(filter_subjects=subjects, start_sequence=1)
    fold = _Fold(rollout_id)
    gate = EventGate()
    async for batch in bus.replay_events(query).batches():
        for record in batch:
            is_accepted = gate.admit(record.message).is_accepted
            if is_accepted and not isinstance(record.message, DeadLettered):
                fold.add(record.message, record.stored_at)
    return _build(fold)
