"""Timelines of recorded rollouts: per-worker Gantt lanes of queueing, generation, tool calls
and migrations, drawn from the rollout's events in the stream.

    timeline = build_timeline(events)              # pure: events in stream order -> segments
    draw_timeline(timeline, Path("out.png"))        # matplotlib Agg
    await write_rollout_timeline(bus, rollout_id, Path("out.png"))   # replay + build + draw

``heddle replay ROLLOUT --timeline out.png`` and the end of ``heddle rollout run`` call
``write_rollout_timeline``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from heddle.bus import Bus, ReplayQuery
from heddle.events import Event
from heddle.events.subjects import rollout_subject, trajectory_subject
from heddle.timeline.draw import draw_timeline, visits
from heddle.timeline.layout import pack_rows
from heddle.timeline.segments import Segment, SegmentKind, Timeline, build_timeline

TIMELINE_KINDS = (
    "submitted",
    "placed",
    "generated",
    "tool_called",
    "tool_returned",
    "migrated",
)
"""Trajectory event kinds a timeline reads (others, like the large ``completed``, are skipped)."""


def timeline_subjects(rollout_id: str) -> tuple[str, ...]:
    """The subjects of one rollout that a timeline needs."""
    return (
        rollout_subject(rollout_id, "*"),
        *(trajectory_subject(rollout_id, "*", kind) for kind in TIMELINE_KINDS),
    )


async def read_rollout_events(bus: Bus, rollout_id: str) -> list[Event]:
    """The timeline's events of ``rollout_id``, in stream order (ValueError when none)."""
    reader = bus.replay_events(ReplayQuery(filter_subjects=timeline_subjects(rollout_id)))
    events: list[Event] = [record.message async for record in reader]
    if not events:
        raise ValueError(f"no events of rollout {rollout_id!r} in the stream")
    return events


async def write_rollout_timeline(bus: Bus, rollout_id: str, path: Path) -> Path:
    """Replay ``rollout_id`` from the stream and draw its timeline into ``path`` (PNG)."""
    events = await read_rollout_events(bus, rollout_id)
    timeline = build_timeline(events)
    return await asyncio.to_thread(draw_timeline, timeline, path)


__all__ = [
    "TIMELINE_KINDS",
    "Segment",
    "SegmentKind",
    "Timeline",
    "build_timeline",
    "draw_timeline",
    "pack_rows",
    "read_rollout_events",
    "timeline_subjects",
    "visits",
    "write_rollout_timeline",
]
