"""The chaos bench's forgeries: events a worker, tool executor or trainer credential may publish,
saying what is not so.

``Forger.forge`` reads what a running rollout's stream holds and publishes forged, early and
duplicate events about it, cycling through ``FORGERIES``; each is wrong by what came before it in
the stream (an unknown rollout or trajectory, a stale hosting, a writer that holds nothing, a
failure naming no worker that nothing asked for, a result for a future step, a step again, an unread
schema version, a negative count, a submission beyond the rollout's count or of the rollout again, a
stored event published again under another id: a retry past the duplicate window). ``refused_count``
counts, of the forgeries' stream sequences, those the control plane (its dead letters) and the
ledger (its gate's dead-letter rows) both refused: ``forged_accepted`` is the rest.

One forgery is not a worker's to publish: a failure naming no worker goes on the control plane's
own subject, which the servers refuse to other credentials; the bench publishes it to show the
event gate refuses it too (``TrajectoryLease.may_fail_unplaced``).

Not forged: events a role may legitimately publish as they are (a new rollout, a worker's
registration) and a perfect impersonation of the holder under its current hosting: that goes on
the holder's own subject, which only the holder's credential may publish (docs/deploy.md), and the
bench runs without credentials.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from heddle.bus import Bus, ReplayQuery
from heddle.events import (
    Completed,
    DeadLettered,
    Event,
    Failed,
    Generated,
    GenerationStarted,
    Migrated,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
)
from heddle.events.subjects import DEADLETTER_SUBJECT, EVENTS_STREAM, rollout_filter
from heddle.ledger import Ledger, queries
from heddle.ledger.gated_fold import GATE_CONSUMER

_POLL_S = 0.2
FORGER = "forger"
WRITTEN = (
    RolloutSubmitted,
    TrajectorySubmitted,
    GenerationStarted,
    Generated,
    ToolCalled,
    ToolReturned,
    Migrated,
    Completed,
    Failed,
)
"""The kinds a worker, tool executor or trainer writes (but ``Preempted``: its holder may
report a step's preemption more than once, each for a command of its own)."""
"""The worker id forged events claim when they claim none that holds anything."""


@dataclass(slots=True)
class Seen:
    """What the stream says of one rollout so far."""

    submitted: RolloutSubmitted | None = None
    holders: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Trajectory -> (worker, hosting) of its last placement or move."""
    unplaced: set[str] = field(default_factory=set)
    """Trajectories submitted and not placed yet."""
    steps: dict[str, int] = field(default_factory=dict)
    """Trajectory -> steps started."""
    written: list[Event] = field(default_factory=list)
    """The rollout's events a worker, tool executor or trainer wrote (not the control
    plane's decisions), in stream order."""


@dataclass(slots=True)
class Forger:
    bus: Bus
    rng: random.Random
    sequences: list[int] = field(default_factory=list)
    """Stream sequences of every forgery published."""
    _numbers: itertools.count[int] = field(default_factory=itertools.count)

    async def forge(self, rollout_id: str, count: int) -> None:
        """Publish ``count`` forgeries about ``rollout_id``, as it stands now."""
        seen = await seen_of(self.bus, rollout_id)
        if seen.submitted is None or not seen.holders:
            return
        for _ in range(count):
            number = next(self._numbers)
            make = FORGERIES[number % len(FORGERIES)]
            event = make(seen, self.rng, f"forged-{number}")
            self.sequences.append((await self.bus.publish(event)).sequence)


async def seen_of(bus: Bus, rollout_id: str) -> Seen:
    seen = Seen()
    query = ReplayQuery(filter_subjects=tuple(rollout_filter(rollout_id)))
    async for record in bus.replay_events(query):
        see(seen, record.message)
    return seen


def see(seen: Seen, event: Event) -> None:
    """Fold one stored event of the rollout into what the forger knows."""
    if isinstance(event, WRITTEN):
        seen.written.append(event)
    match event:
        case RolloutSubmitted() as submitted:
            seen.submitted = submitted
        case TrajectorySubmitted() as submitted:
            seen.unplaced.add(submitted.traj_id)
        case TrajectoryPlaced() as placed:
            seen.holders[placed.traj_id] = (placed.worker_id, placed.epoch)
            seen.unplaced.discard(placed.traj_id)
        case Migrated() as moved:
            seen.holders[moved.traj_id] = (moved.target_worker_id, moved.target_epoch)
        case GenerationStarted() as started:
            seen.steps[started.traj_id] = max(seen.steps.get(started.traj_id, 0), started.step + 1)


def _victim(seen: Seen, rng: random.Random) -> tuple[str, str, int]:
    """A placed trajectory of the rollout: (trajectory, holder, hosting)."""
    traj_id = rng.choice(sorted(seen.holders))
    worker_id, epoch = seen.holders[traj_id]
    return traj_id, worker_id, epoch


def _completed(seen: Seen, traj_id: str, event_id: str, **fields: object) -> Completed:
    assert seen.submitted is not None
    values: dict[str, object] = {"num_steps": 1, "reward": 999.0, "worker_id": FORGER}
    values.update(fields)
    return Completed(
        event_id=event_id,
        rollout_id=seen.submitted.rollout_id,
        occurred_at=seen.submitted.occurred_at,
        traj_id=traj_id,
        **values,  # type: ignore[arg-type]
    )


def _unknown_rollout(seen: Seen, rng: random.Random, event_id: str) -> Event:
    assert seen.submitted is not None
    forged = _completed(seen, "t000000", event_id)
    return msgspec.structs.replace(forged, rollout_id=f"{event_id}-rollout")


def _unknown_trajectory(seen: Seen, rng: random.Random, event_id: str) -> Event:
    return _completed(seen, "t999999", event_id)


def _stale_completion(seen: Seen, rng: random.Random, event_id: str) -> Event:
    """A real trajectory completed (reward 999) by its holder under a hosting before its own."""
    traj_id, worker_id, epoch = _victim(seen, rng)
    return _completed(seen, traj_id, event_id, worker_id=worker_id, epoch=max(0, epoch - 1))


def _not_holder(seen: Seen, rng: random.Random, event_id: str) -> Event:
    traj_id, _, epoch = _victim(seen, rng)
    assert seen.submitted is not None
    return Generated(
        event_id=event_id,
        rollout_id=seen.submitted.rollout_id,
        occurred_at=seen.submitted.occurred_at,
        traj_id=traj_id,
        step=max(0, seen.steps.get(traj_id, 1) - 1),
        worker_id=FORGER,
        epoch=epoch,
        output_token_ids=[1, 2, 3],
    )


def _unasked_failure(seen: Seen, rng: random.Random, event_id: str) -> Event:
    """A trajectory ended by a failure naming no worker (the control plane's own subject,
    ``failed.control_plane``) that no abort request or refused submission asked for: one not
    placed yet when there is one (no worker holds it to refuse for), else a placed one."""
    if seen.unplaced:
        traj_id, epoch = rng.choice(sorted(seen.unplaced)), 0
    else:
        traj_id, _, epoch = _victim(seen, rng)
    assert seen.submitted is not None
    return Failed(
        event_id=event_id,
        rollout_id=seen.submitted.rollout_id,
        occurred_at=seen.submitted.occurred_at,
        traj_id=traj_id,
        epoch=epoch,
        step=0,
        reason="forged",
        finish_reason="aborted",
    )


def _future_tool_result(seen: Seen, rng: random.Random, event_id: str) -> Event:
    traj_id, _, _ = _victim(seen, rng)
    assert seen.submitted is not None
    step = seen.steps.get(traj_id, 0) + 1000
    return ToolReturned(
        event_id=event_id,
        rollout_id=seen.submitted.rollout_id,
        occurred_at=seen.submitted.occurred_at,
        traj_id=traj_id,
        step=step,
        call_id=f"{event_id}-call",
        tool="trace",
        status="ok",
        output="forged",
    )


def _step_again(seen: Seen, rng: random.Random, event_id: str) -> Event:
    """Step 0 started again by the holder under its hosting, once it started it."""
    traj_id, worker_id, epoch = _victim(seen, rng)
    assert seen.submitted is not None
    return GenerationStarted(
        event_id=event_id,
        rollout_id=seen.submitted.rollout_id,
        occurred_at=seen.submitted.occurred_at,
        traj_id=traj_id,
        step=0 if seen.steps.get(traj_id, 0) > 0 else 1000,
        worker_id=worker_id,
        epoch=epoch,
        num_context_tokens=1,
    )


def _unread_version(seen: Seen, rng: random.Random, event_id: str) -> Event:
    traj_id, worker_id, epoch = _victim(seen, rng)
    forged = _completed(seen, traj_id, event_id, worker_id=worker_id, epoch=epoch)
    return msgspec.structs.replace(forged, version=rng.choice((99, -5)))


def _negative_count(seen: Seen, rng: random.Random, event_id: str) -> Event:
    traj_id, worker_id, epoch = _victim(seen, rng)
    return _completed(
        seen, traj_id, event_id, worker_id=worker_id, epoch=epoch, num_output_tokens=-5
    )


def _extra_submission(seen: Seen, rng: random.Random, event_id: str) -> Event:
    assert seen.submitted is not None
    spec = TrajectorySpec(group_id="forged", index=0, environment="trace")
    return TrajectorySubmitted(
        event_id=event_id,
        rollout_id=seen.submitted.rollout_id,
        occurred_at=seen.submitted.occurred_at,
        traj_id=f"t9{rng.randrange(10**5):05d}",
        spec=spec,
    )


def _rollout_again(seen: Seen, rng: random.Random, event_id: str) -> Event:
    assert seen.submitted is not None
    return msgspec.structs.replace(seen.submitted, event_id=event_id, num_trajectories=10_000)


def _repeat(seen: Seen, rng: random.Random, event_id: str) -> Event:
    """A stored event written again under another id (a publish retried after the duplicate
    window, a worker's step run again)."""
    return msgspec.structs.replace(rng.choice(seen.written), event_id=event_id)


Forgery = Callable[[Seen, random.Random, str], Event]
FORGERIES: tuple[Forgery, ...] = (
    _unknown_rollout,
    _unknown_trajectory,
    _stale_completion,
    _not_holder,
    _unasked_failure,
    _future_tool_result,
    _step_again,
    _unread_version,
    _negative_count,
    _extra_submission,
    _rollout_again,
    _repeat,
)


async def refused_by_control_plane(bus: Bus, durable: str, last: int, timeout_s: float) -> set[int]:
    """Stream sequences the control plane's consumer dead-lettered, once it acknowledged (its
    dead letters stored) everything up to ``last``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = await bus.consumer_state(EVENTS_STREAM, durable)
        if state is not None and state.ack_floor_sequence >= last:
            break
        await asyncio.sleep(_POLL_S)
    refused: set[int] = set()
    async for record in bus.replay_events(ReplayQuery(filter_subjects=(DEADLETTER_SUBJECT,))):
        letter = record.message
        if isinstance(letter, DeadLettered) and letter.consumer == durable:
            refused.add(letter.stream_sequence)
    return refused


def refused_by_ledger(ledger: Ledger) -> set[int]:
    """Stream sequences the ledger's gate refused."""
    rows = queries.dead_letters(ledger, limit=10_000_000)
    return {row.stream_sequence for row in rows if row.consumer == GATE_CONSUMER}
