"""Publishing: subjects, message ids, de-duplication, retries across a server restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from events_factory import generated_of, steps

from heddle.bus import (
    Bus,
    BusOptions,
    EmbeddedNatsServer,
    PublishError,
    PublishOptions,
    ReplayQuery,
)
from heddle.config import Settings
from heddle.events import Drain, ToolCall, TraceTool
from heddle.events.subjects import COMMANDS_STREAM, EVENTS_SUBJECTS, TOOLS_STREAM


async def test_publish_returns_the_stream_sequence(bus: Bus) -> None:
    first = await bus.publish(generated_of("r1", 0, 0))
    second = await bus.publish(generated_of("r1", 0, 1))
    assert (first.stream, first.sequence, first.duplicate) == ("HEDDLE_EVENTS", 1, False)
    assert second.sequence == 2


async def test_same_event_id_is_stored_once(bus: Bus) -> None:
    event = generated_of("r1", 3, 2)
    first = await bus.publish(event)
    again = await bus.publish(event)
    assert again.duplicate
    assert again.sequence == first.sequence
    assert (await bus.stream_state()).num_messages == 1


async def test_the_stored_message_carries_its_id_as_nats_msg_id(bus: Bus) -> None:
    event = generated_of("r1", 4, 0)
    ack = await bus.publish(event)
    stored = await bus.js.get_msg(ack.stream, ack.sequence)
    assert stored.headers == {"Nats-Msg-Id": event.event_id}
    assert stored.subject is not None and stored.subject.endswith(".generated.worker-w00")


async def test_an_id_with_a_line_break_is_published_and_deduplicated_by_nats_py(bus: Bus) -> None:
    first = await bus.publish_raw("heddle.evt.traj.r1.t1.generated", b"{}", "odd\nid")
    again = await bus.publish_raw("heddle.evt.traj.r1.t1.generated", b"{}", "odd\nid")
    assert not first.duplicate and again.duplicate and again.sequence == first.sequence


async def test_commands_go_to_their_streams(bus: Bus) -> None:
    drain = await bus.publish(Drain(command_id="op-1", issued_at=0.0, worker_id="w00"))
    call = ToolCall(
        command_id="c1",
        issued_at=0.0,
        traj_id="t000000",
        step=0,
        call_id="call-1",
        request=TraceTool(duration_s=0.1, num_output_tokens=3),
    )
    tool = await bus.publish(call)
    assert drain.stream == COMMANDS_STREAM
    assert tool.stream == TOOLS_STREAM


async def test_publish_many_acks_in_input_order(bus: Bus) -> None:
    events = steps("r1", 7, 30)
    acks = await bus.publish_many(events)
    assert [ack.sequence for ack in acks] == list(range(1, len(events) + 1))
    again = await bus.publish_many(events[:5])
    assert all(ack.duplicate for ack in again)


async def test_publish_without_a_stream_fails_after_the_deadline(settings: Settings) -> None:
    options = BusOptions(publish=PublishOptions(ack_timeout_s=0.3, retry_deadline_s=1.0))
    async with Bus(settings, options) as bus:
        with pytest.raises(PublishError, match=r"nostream\.x"):
            await bus.publish_raw("nostream.x", b"{}", "id-1")


async def test_retry_across_a_server_restart_stores_each_message_once(tmp_path: Path) -> None:
    store = tmp_path / "nats"
    server = EmbeddedNatsServer(store).start()
    options = BusOptions(
        publish=PublishOptions(ack_timeout_s=0.5, retry_deadline_s=30.0, max_in_flight=64)
    )
    events = steps("r1", 40, 100)
    try:
        async with Bus(Settings(nats_url=server.url, data_dir=tmp_path), options) as bus:
            first = await bus.publish_many(events[:300])
            publishing = asyncio.create_task(bus.publish_many(events[300:]))
            await asyncio.sleep(0)
            await asyncio.to_thread(server.stop)
            await asyncio.sleep(0.3)
            server = EmbeddedNatsServer(store, port=server.port)
            await asyncio.to_thread(server.start)
            acks = first + await publishing
            assert bus.num_resent > 0
            ids = [
                record.message.event_id
                async for record in bus.replay_events(ReplayQuery((EVENTS_SUBJECTS,)))
            ]
    finally:
        server.stop()
    assert len(acks) == len(events)
    assert len(ids) == len(set(ids)) == len(events)
    assert set(ids) == {event.event_id for event in events}
