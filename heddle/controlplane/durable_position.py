"""Where the deciders' durable resumes, and what is said when it was lost.

The durable's ack floor is the last event whose outputs are stored. A durable that is missing
but whose position was recorded (``heddle.bus.positions``: the control plane records it as it
goes) was deleted, or lost by the server, while the control plane was down: it is recreated
from that position, and the loss is logged and counted (``heddle status``). A durable never
recorded adopts the stream as it is: everything already in it counts as handled, so a control
plane started on an old data dir does not re-place old rollouts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from heddle.bus import Bus
from heddle.controlplane.consumer_stats import ConsumerStats
from heddle.events.subjects import EVENTS_STREAM

log = logging.getLogger(__name__)

OnLost = Callable[[int, str], None]
"""Told where a lost durable is recreated, and when it was lost."""


async def start_position(bus: Bus, durable: str, since_sequence: int, on_lost: OnLost) -> int:
    """The last stream sequence whose outputs are stored (never before ``since_sequence``)."""
    floor = since_sequence - 1
    state = await bus.consumer_state(EVENTS_STREAM, durable)
    if state is not None:
        return max(state.ack_floor_sequence, floor)
    recorded = await _recorded_position(bus, durable)
    if recorded is not None:
        on_lost(recorded, "while the control plane was down")
        return max(recorded, floor)
    return max((await bus.stream_state()).last_sequence, floor)


async def _recorded_position(bus: Bus, durable: str) -> int | None:
    try:
        return await bus.positions.recorded(durable)
    except Exception as exc:  # a credential without the bucket: adopt the stream
        log.warning("%s: no recorded position readable (%r)", durable, exc)
        return None


def note_lost(stats: ConsumerStats, position: int, when: str, wall_s: float) -> None:
    """Say that the durable disappeared, and where it is recreated."""
    stats.num_durable_losses += 1
    stats.durable_lost_at = wall_s
    stats.recreated_after = position
    log.error(
        "durable %s of %s disappeared %s (deleted, or lost by the server): recreating it "
        "after #%d, the last event whose outputs are stored, not at the stream's end",
        stats.durable, EVENTS_STREAM, when, position,
    )  # fmt: skip
