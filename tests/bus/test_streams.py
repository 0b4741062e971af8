"""Stream and consumer provisioning against a real nats-server."""

from __future__ import annotations

from dataclasses import replace

from events_factory import steps

from heddle.bus import Bus, ConsumerSpec
from heddle.bus.streams import EVENTS, HEDDLE_STREAMS, TOOLS, provision_consumer, provision_stream
from heddle.events.subjects import EVENTS_STREAM, EVENTS_SUBJECTS


async def test_streams_exist_with_their_retention(bus: Bus) -> None:
    for spec in HEDDLE_STREAMS:
        info = await bus.js.stream_info(spec.name)
        assert info.config.subjects == list(spec.subjects)
    events = await bus.js.stream_info(EVENTS.name)
    tools = await bus.js.stream_info(TOOLS.name)
    assert events.config.retention == "limits"
    assert events.config.duplicate_window == 120.0
    assert tools.config.retention == "workqueue"


async def test_provisioning_is_idempotent_and_keeps_messages(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 2, 3))
    await bus.provision()
    await bus.provision()
    state = await bus.stream_state()
    assert state.num_messages == 6


async def test_provisioning_applies_a_changed_config(bus: Bus) -> None:
    await provision_stream(bus.js, replace(EVENTS, duplicate_window_s=30.0, max_age_s=3600.0))
    changed = await bus.js.stream_info(EVENTS.name)
    assert changed.config.duplicate_window == 30.0
    assert changed.config.max_age == 3600.0
    await bus.provision()
    restored = await bus.js.stream_info(EVENTS.name)
    assert restored.config.duplicate_window == 120.0
    assert not restored.config.max_age


async def test_consumer_provisioning_applies_changes(bus: Bus) -> None:
    spec = ConsumerSpec(
        "projector",
        EVENTS_STREAM,
        (EVENTS_SUBJECTS,),
        role="ledger_projector",
        max_ack_pending=1000,
    )
    await provision_consumer(bus.js, spec)
    await provision_consumer(bus.js, spec)
    await provision_consumer(
        bus.js, replace(spec, batch_size=64, max_ack_pending=64, ack_wait_s=5.0)
    )
    info = await bus.js.consumer_info(EVENTS_STREAM, "projector")
    assert info.config.max_ack_pending == 64
    assert info.config.ack_wait == 5.0


async def test_start_sequence_recreates_the_durable_there(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 1, 10))
    spec = ConsumerSpec("projector", EVENTS_STREAM, (EVENTS_SUBJECTS,), role="ledger_projector")
    await provision_consumer(bus.js, spec)
    await provision_consumer(bus.js, replace(spec, start_sequence=7))
    state = await bus.consumer_state(EVENTS_STREAM, "projector")
    assert state is not None
    assert state.num_pending == 4
    assert await bus.consumer_state(EVENTS_STREAM, "absent") is None
