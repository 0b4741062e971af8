"""The pipelined runner on a real durable: a delivery that never reaches it (here another
subscriber on the same durable takes it, as a pull response lost with a dying cluster node
would) stops it with ``ConsumerFailed`` before its acknowledgement could cover the missing
event, so a rebuilt consumer resumes at or before it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import events_factory as b
import pytest
from waiting import until

from heddle.bus import Bus, ConsumerFailed, ConsumerSpec, Delivery, Stage
from heddle.events import EventT, decode_event
from heddle.events.subjects import EVENTS_STREAM, EVENTS_SUBJECTS

DURABLE = "pipeline-gap"


def completions(first: int, count: int) -> list[EventT]:
    return [b.completed(f"t{index}", 1, 10) for index in range(first, first + count)]


async def test_a_delivery_lost_in_transit_stops_the_pipeline_before_it_is_acknowledged(
    bus: Bus,
) -> None:
    decided: list[int] = []

    def decide(deliveries: list[Delivery[EventT]]) -> Iterable[Stage]:
        decided.extend(delivery.stream_sequence for delivery in deliveries)
        yield Stage([], [])

    spec = ConsumerSpec(
        durable=DURABLE,
        stream=EVENTS_STREAM,
        filter_subjects=(EVENTS_SUBJECTS,),
        role="control_plane",
        batch_size=4,
        fetch_wait_s=0.2,
        max_ack_pending=64,
        ack_all=True,
        start_sequence=1,
    )
    runner = bus.pipelined_runner(spec, decode_event, decide)
    running = asyncio.create_task(runner.run())
    await bus.publish_many(completions(0, 3))
    await until(lambda: _count(decided, 3))
    thief = await bus.js.pull_subscribe_bind(DURABLE, stream=EVENTS_STREAM)
    stolen_requests = asyncio.create_task(thief.fetch(2, timeout=60))

    async def both_wait() -> bool:
        state = await bus.consumer_state(EVENTS_STREAM, DURABLE)
        return state is not None and state.num_waiting >= 2

    # The thief's pull request waits at the server beside the runner's (a loaded machine
    # takes a while to send it: waited for, not slept on).
    await until(both_wait, "the thief's request at the server")
    await bus.publish_many(completions(3, 40))
    stolen = await stolen_requests
    with pytest.raises(ConsumerFailed, match="expected from"):
        await asyncio.wait_for(running, 20)
    lost = min(message.metadata.sequence.stream for message in stolen)
    assert lost not in decided
    info = await bus.js.consumer_info(EVENTS_STREAM, DURABLE)
    assert info.ack_floor.stream_seq < lost  # nothing acknowledged over the lost delivery


async def _count(decided: list[int], count: int) -> bool:
    return len(decided) >= count
