"""Ordered replay: everything, from a sequence, from a time, one rollout; stops when caught up."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from events_factory import generated_of, steps

from heddle.bus import Bus, ReplayQuery
from heddle.events import Generated
from heddle.events.subjects import EVENTS_SUBJECTS, rollout_filter, trajectory_subject

ALL = (EVENTS_SUBJECTS,)


async def replay(bus: Bus, query: ReplayQuery) -> list[tuple[int, str, str]]:
    return [
        (record.stream_sequence, record.subject, record.message.event_id)
        async for record in bus.replay_events(query)
    ]


async def test_replays_everything_in_order(bus: Bus) -> None:
    events = steps("r1", 3, 50)
    await bus.publish_many(events)
    records = await replay(bus, ReplayQuery(ALL, batch_size=16))
    assert [seq for seq, _, _ in records] == list(range(1, 151))
    assert [event_id for _, _, event_id in records] == [e.event_id for e in events]
    assert records[0][1] == f"{trajectory_subject('r1', 't000000', 'generated')}.worker-w00"


async def test_replays_from_a_sequence(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 1, 20))
    records = await replay(bus, ReplayQuery(ALL, start_sequence=15))
    assert [seq for seq, _, _ in records] == [15, 16, 17, 18, 19, 20]
    assert await replay(bus, ReplayQuery(ALL, start_sequence=21)) == []


async def test_replays_from_a_time(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 1, 5))
    await asyncio.sleep(0.05)
    since = datetime.datetime.now(datetime.UTC)
    await asyncio.sleep(0.05)
    later = await bus.publish_many(steps("r2", 1, 3))
    records = await replay(bus, ReplayQuery(ALL, start_time=since))
    assert [seq for seq, _, _ in records] == [ack.sequence for ack in later]


async def test_replays_one_rollout(bus: Bus) -> None:
    late = [generated_of("r1", 5, 0), generated_of("r1", 6, 0)]
    await bus.publish_many(steps("r1", 2, 5) + steps("r2", 2, 5) + late)
    query = ReplayQuery(tuple(rollout_filter("r1")))
    records = [record async for record in bus.replay_events(query)]
    assert len(records) == 12
    assert all(isinstance(r.message, Generated) and r.message.rollout_id == "r1" for r in records)
    assert [r.stream_sequence for r in records] == sorted(r.stream_sequence for r in records)


async def test_empty_replay_ends_at_once(bus: Bus) -> None:
    assert await replay(bus, ReplayQuery(ALL)) == []
    await bus.publish_many(steps("r1", 1, 2))
    assert await replay(bus, ReplayQuery(tuple(rollout_filter("nope")))) == []


async def test_skips_undecodable_messages(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 1, 2))
    await bus.publish_raw(trajectory_subject("r1", "t000000", "generated"), b"garbage", "g")
    await bus.publish_many(steps("r1", 1, 3)[2:])
    reader = bus.replay_events(ReplayQuery(ALL))
    sequences = [record.stream_sequence async for record in reader]
    assert sequences == [1, 2, 4]
    assert reader.num_skipped == 1 and reader.last_sequence == 4


async def test_replay_leaves_no_consumer_behind(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 1, 30))
    reader = bus.replay_events(ReplayQuery(ALL, batch_size=4))
    async for batch in reader.batches():
        assert len(batch) <= 4
    info = await bus.js.stream_info("HEDDLE_EVENTS")
    assert info.state.consumer_count == 0


def test_query_validation() -> None:
    now = datetime.datetime.now(datetime.UTC)
    with pytest.raises(ValueError, match="not both"):
        ReplayQuery(ALL, start_sequence=3, start_time=now)
    with pytest.raises(ValueError, match="timezone"):
        ReplayQuery(ALL, start_time=datetime.datetime.now())
    with pytest.raises(ValueError, match="filter"):
        ReplayQuery(())
