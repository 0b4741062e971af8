"""Timelines of recorded rollouts: per-worker Gantt lanes of queueing, generation, tool calls
and migrations, drawn from the rollout's events in the stream.

    timeline = build_timeline(events)              # pure: events in stream order -> segments
    draw_timeline(timeline, Path("out.png"))        # matplotlib Agg
    await write_rollout_timeline(bus, rollout_id, Path("out.png"))   # replay + build + draw

``heddle replay ROLLOUT --timeline out.png`` and the end of ``heddle rollout run`` call
``write_rollout_timeline``.

Modules: ``segments`` (``build_timeline``: where each trajectory spent its time, on which worker),
``layout`` (packing a lane's intervals into non-overlapping rows), ``draw`` (``draw_timeline``: the
PNG).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from heddle.bus import Bus
from heddle.events import Event, RolloutEvent, TrajectoryEvent
from heddle.replay import replay_query
from heddle.timeline.draw import draw_timeline, visits
from heddle.timeline.layout import pack_rows
from heddle.timeline.segments import Segment, SegmentKind, Timeline, build_timeline


async def read_rollout_events(bus: Bus, rollout_id: str) -> list[Event]:
    """The events of ``rollout_id`` (its own and its trajectories'), in stream order; ValueError
    when there are none. One filter subject (``heddle.replay.replay_query``): the server works
    several times harder per message for a consumer with several."""
    reader = bus.replay_events(replay_query(rollout_id))
    events: list[Event] = [
        record.message
        async for record in reader
        if isinstance(record.message, (RolloutEvent, TrajectoryEvent))
        and record.message.rollout_id == rollout_id
    ]
    if not events:
        raise ValueError(f"no events of rollout {rollout_id!r} in the stream")
    return events


async def write_rollout_timeline(bus: Bus, rollout_id: str, path: Path) -> Path:
    """Replay ``rollout_id`` from the stream and draw its timeline into ``path`` (PNG)."""
    events = await read_rollout_events(bus, rollout_id)
    timeline = build_timeline(events)
    return await asyncio.to_thread(draw_timeline, timeline, path)


__all__ = [
    "Segment",
    "SegmentKind",
    "Timeline",
    "build_timeline",
    "draw_timeline",
    "pack_rows",
    "read_rollout_events",
    "visits",
    "write_rollout_timeline",
]
