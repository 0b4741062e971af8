"""The pull-consumer runner: acks, dead letters, transient errors, ordering, concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest
from events_factory import generated_of, steps
from waiting import until

from heddle.bus import (
    Bus,
    ConsumerSpec,
    Delivery,
    EmbeddedNatsServer,
    InvalidMessage,
    Rejection,
    TransientError,
)
from heddle.config import Settings
from heddle.events import DeadLettered, EventT, Generated, decode_event
from heddle.events.subjects import DEADLETTER_SUBJECT, EVENTS_STREAM, trajectory_subject

R1 = (trajectory_subject("r1", "*", ">"),)


def spec(durable: str = "c1", **overrides: object) -> ConsumerSpec:
    values: dict[str, object] = {"batch_size": 16, "fetch_wait_s": 0.2, "nak_delay_s": 0.1}
    values.update(overrides)
    return ConsumerSpec(durable, EVENTS_STREAM, R1, role="operator", **values)  # type: ignore[arg-type]


async def dead_letters(bus: Bus) -> list[DeadLettered]:
    received: list[DeadLettered] = []

    async def collect(batch: list[Delivery[EventT]]) -> None:
        received.extend(d.message for d in batch if isinstance(d.message, DeadLettered))

    dlq = ConsumerSpec(
        "dlq-reader", EVENTS_STREAM, (DEADLETTER_SUBJECT,), role="operator", fetch_wait_s=0.1
    )
    await bus.batch_runner(dlq, decode_event, collect).run(until_idle=True)
    return received


async def test_batches_arrive_in_order_and_are_acked(bus: Bus) -> None:
    events = steps("r1", 5, 10)
    await bus.publish_many(events)
    seen: list[int] = []

    async def handle(batch: list[Delivery[EventT]]) -> None:
        seen.extend(delivery.stream_sequence for delivery in batch)
        assert all(delivery.num_delivered == 1 for delivery in batch)

    stats = await bus.batch_runner(spec(), decode_event, handle).run(until_idle=True)
    assert seen == list(range(1, len(events) + 1))
    assert stats.num_acked == len(events)
    state = await bus.consumer_state(EVENTS_STREAM, "c1")
    assert state is not None and state.num_pending == 0
    assert state.ack_floor_sequence == len(events)


@pytest.mark.parametrize("ack_all", [False, True])
async def test_poison_messages_are_dead_lettered_and_valid_work_continues(
    bus: Bus, ack_all: bool
) -> None:
    subject = trajectory_subject("r1", "t000000", "generated")
    wrong_type = msgspec.json.encode(
        {"kind": "traj.generated", "event_id": "x", "occurred_at": "soon", "traj_id": "t"}
    )
    await bus.publish(generated_of("r1", 0, 0))
    await bus.publish_raw(subject, b"{not json", "bad-json")
    await bus.publish_raw(subject, wrong_type, "wrong-type")
    await bus.publish_raw(subject, b'{"kind": "traj.exploded", "event_id": "y"}', "unknown")
    await bus.publish(generated_of("r1", 0, 1))
    handled: list[int] = []

    async def handle(batch: list[Delivery[EventT]]) -> None:
        handled.extend(d.message.step for d in batch if isinstance(d.message, Generated))

    runner = bus.batch_runner(spec(ack_all=ack_all), decode_event, handle)
    stats = await runner.run(until_idle=True)
    assert handled == [0, 1]
    assert stats.num_dead_lettered == 3
    letters = sorted(await dead_letters(bus), key=lambda letter: letter.stream_sequence)
    assert [letter.stream_sequence for letter in letters] == [2, 3, 4]
    assert all(letter.consumer == "c1" and letter.subject == subject for letter in letters)
    assert all(letter.rollout_id == "r1" for letter in letters)
    assert "malformed JSON" in letters[0].reason and letters[0].payload == "{not json"
    assert "occurred_at" in letters[1].reason
    assert "traj.exploded" in letters[2].reason
    state = await bus.consumer_state(EVENTS_STREAM, "c1")
    assert state is not None and state.num_pending == 0 and state.num_ack_pending == 0


async def test_oversize_payload_is_dead_lettered(tmp_path: Path) -> None:
    big_limit = 16 * 1024 * 1024
    with EmbeddedNatsServer(tmp_path / "nats", max_payload_bytes=big_limit) as server:
        async with Bus(Settings(nats_url=server.url, data_dir=tmp_path)) as bus:
            subject = trajectory_subject("r1", "t000000", "generated")
            await bus.publish_raw(subject, b" " * (9 * 1024 * 1024), "huge")
            await bus.publish(generated_of("r1", 0, 1))
            handled: list[int] = []

            async def handle(batch: list[Delivery[EventT]]) -> None:
                handled.extend(d.stream_sequence for d in batch)

            stats = await bus.batch_runner(spec(), decode_event, handle).run(until_idle=True)
            letters = await dead_letters(bus)
    assert handled == [2]
    assert stats.num_dead_lettered == 1
    assert "exceeds" in letters[0].reason
    assert len(letters[0].payload) == 4096


async def test_handler_rejections_are_dead_lettered(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 1, 4))

    async def handle(batch: list[Delivery[EventT]]) -> Sequence[Rejection]:
        return [Rejection(d, "step 2 is cursed") for d in batch if d.stream_sequence == 3]

    stats = await bus.batch_runner(spec(), decode_event, handle).run(until_idle=True)
    letters = await dead_letters(bus)
    assert stats.num_acked == 3 and stats.num_dead_lettered == 1
    assert [(letter.stream_sequence, letter.reason) for letter in letters] == [
        (3, "step 2 is cursed")
    ]


async def test_transient_error_redelivers_with_explicit_acks(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 1, 3))
    deliveries: list[tuple[int, int]] = []
    redelivered = asyncio.Event()

    async def handle(batch: list[Delivery[EventT]]) -> None:
        deliveries.extend((d.stream_sequence, d.num_delivered) for d in batch)
        if len(deliveries) >= 6:
            redelivered.set()
        if any(d.num_delivered == 1 and d.stream_sequence == 2 for d in batch):
            raise TransientError("database busy")

    runner = bus.batch_runner(spec(), decode_event, handle)
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(redelivered.wait(), 20)
    runner.stop()
    stats = await task
    assert (2, 2) in deliveries
    assert stats.num_retried >= 1
    assert {seq for seq, _ in deliveries} == {1, 2, 3}


async def test_transient_error_rewinds_in_order_consumers(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 1, 40))
    order: list[int] = []
    failed = False

    async def handle(batch: list[Delivery[EventT]]) -> None:
        nonlocal failed
        if not failed and batch[-1].stream_sequence >= 20:
            failed = True
            raise TransientError("database locked")
        order.extend(d.stream_sequence for d in batch)

    runner = bus.batch_runner(spec(ack_all=True, batch_size=8), decode_event, handle)
    stats = await runner.run(until_idle=True)
    assert order == list(range(1, 41))
    assert stats.num_retried > 0


async def test_handler_bug_stops_the_runner_and_the_batch_comes_back(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 1, 2))

    async def broken(batch: list[Delivery[EventT]]) -> None:
        raise RuntimeError("bug")

    crashing = spec(ack_wait_s=1.0)  # the unacked batch comes back once its ack wait passes
    with pytest.raises(RuntimeError, match="bug"):
        await bus.batch_runner(crashing, decode_event, broken).run()
    got: list[int] = []

    async def fixed(batch: list[Delivery[EventT]]) -> None:
        got.extend(d.num_delivered for d in batch)

    # The batch comes back once the server's ack wait has passed: waited for, not slept on
    # (a loaded server redelivers late; an idle check before that would see nothing pending).
    runner = bus.batch_runner(crashing, decode_event, fixed)
    running = asyncio.create_task(runner.run())
    await until(lambda: len(got) >= 2, "the unacknowledged batch redelivered", 60)
    runner.stop()
    await asyncio.wait_for(running, 60)
    assert len(got) == 2 and min(got) >= 2


async def test_message_runner_handles_concurrently_and_dead_letters(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 8, 1))
    running = 0
    peak = 0
    done: list[int] = []

    async def handle(delivery: Delivery[EventT]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        if delivery.stream_sequence == 5:
            raise InvalidMessage("trajectory unknown")
        done.append(delivery.stream_sequence)

    runner = bus.message_runner(spec(), decode_event, handle, max_concurrent=4)
    stats = await runner.run(until_idle=True)
    assert sorted(done) == [1, 2, 3, 4, 6, 7, 8]
    assert 2 <= peak <= 4
    assert stats.num_dead_lettered == 1
    assert [letter.reason for letter in await dead_letters(bus)] == ["trajectory unknown"]


async def test_stop_is_graceful(bus: Bus) -> None:
    await bus.publish_many(steps("r1", 1, 3))
    handled: list[int] = []
    all_handled = asyncio.Event()

    async def handle(delivery: Delivery[EventT]) -> None:
        await asyncio.sleep(0.05)
        handled.append(delivery.stream_sequence)
        if len(handled) == 3:
            all_handled.set()

    runner = bus.message_runner(spec(), decode_event, handle, max_concurrent=2)
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(all_handled.wait(), 10)
    runner.stop()
    stats = await asyncio.wait_for(task, 60)
    assert stats.num_acked == 3


async def test_a_stop_asked_before_the_run_is_kept(bus: Bus) -> None:
    """A process told to stop while still starting (SIGTERM before its consumer runs) stops:
    ``run()`` returns at once, and a later ``run()`` serves again."""
    await bus.publish_many(steps("r1", 1, 2))
    handled: list[int] = []

    async def handle(batch: list[Delivery[EventT]]) -> None:
        handled.extend(d.stream_sequence for d in batch)

    async def handle_one(delivery: Delivery[EventT]) -> None:
        handled.append(delivery.stream_sequence)

    batches = bus.batch_runner(spec("c-batch"), decode_event, handle)
    messages = bus.message_runner(spec("c-message"), decode_event, handle_one)
    for runner in (batches, messages):
        runner.stop()
        await asyncio.wait_for(runner.run(), 60)
    assert handled == []
    await asyncio.wait_for(batches.run(until_idle=True), 60)
    assert handled == [1, 2]


async def test_a_message_held_past_its_ack_wait_is_kept_alive_not_redelivered(bus: Bus) -> None:
    """A handler that works longer than the ack wait keeps its message: the runner tells the
    server it still works on it (``+WPI``), so the server hands it to nobody else."""
    await bus.publish_many(steps("r1", 1, 1))
    deliveries: list[int] = []

    async def handle(delivery: Delivery[EventT]) -> None:
        deliveries.append(delivery.num_delivered)
        await asyncio.sleep(10.0)  # two and a half ack waits

    # Two at a time: a redelivered message would be fetched and handled while the first works.
    # A 4 s ack wait: the first keep-alive comes within 2 s, so a loaded machine has 2 s to spare.
    runner = bus.message_runner(spec(ack_wait_s=4.0), decode_event, handle, max_concurrent=2)
    stats = await asyncio.wait_for(runner.run(until_idle=True), 60)
    assert deliveries == [1]
    assert stats.num_acked == 1
    info = await bus.js.consumer_info(EVENTS_STREAM, "c1")
    assert info.num_redelivered == 0
