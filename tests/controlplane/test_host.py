"""Decider units on a real durable consumer: decides live and publishes, rebuilds its state by
replay after a restart without deciding anything twice, adopts the past of a stream it first
meets, dead-letters refused events and keeps going; several units share one durable (each
event decided by every unit that handles it, refused ones dead-lettered once)."""

from __future__ import annotations

import asyncio

import events_factory as b
from waiting import until

from heddle.bus import Bus, ReplayQuery
from heddle.control.bundle import ControlOptions
from heddle.control.bundle_router import PLACEMENT, BundleRouter
from heddle.controlplane.host import DeciderConsumer
from heddle.controlplane.liveness import WorkerLiveness
from heddle.controlplane.plane_config import HostConfig
from heddle.events import (
    Completed,
    DeadLettered,
    Event,
    RolloutFinished,
    RolloutSubmitted,
    TrajectorySpec,
    TrajectorySubmitted,
)
from heddle.events.subjects import DEADLETTER_SUBJECT, EVENTS_STREAM, rollout_subject
from heddle.policy.prediction.online import OnlinePredictor
from heddle.sim import SimConfig

CONFIG = HostConfig(fetch_wait_s=0.2)


LATE = "prediction+reshard+priority+transfer+rollout"


def make_router() -> BundleRouter:
    """A router deciding in two stages, placement first (as the control plane does)."""
    config = SimConfig(model="qwen3-8b")
    options = ControlOptions(cost_for_tp=config.cost_for_tp, predictor=OnlinePredictor())
    return BundleRouter(options, first=(PLACEMENT,))


def submitted(rollout_id: str, num: int, policy: str = "verl") -> list[Event]:
    """A rollout's submission and its ``num`` trajectories' (``t0``, ``t1``, ...)."""
    opened: list[Event] = [
        RolloutSubmitted(
            event_id=f"{rollout_id}:submitted",
            rollout_id=rollout_id,
            occurred_at=1.0,
            policy=policy,
            num_trajectories=num,
        )
    ]
    for index in range(num):
        spec = TrajectorySpec(group_id="g", index=index, environment="trace")
        opened.append(
            TrajectorySubmitted(
                event_id=f"{rollout_id}:t{index}:submitted",
                rollout_id=rollout_id,
                occurred_at=1.0,
                traj_id=f"t{index}",
                spec=spec,
            )
        )
    return opened


def completed(rollout_id: str, index: int) -> Completed:
    return Completed(
        event_id=f"{rollout_id}:t{index}:completed",
        rollout_id=rollout_id,
        occurred_at=2.0 + index,
        traj_id=f"t{index}",
        num_steps=1,
        num_output_tokens=10,
    )


async def read(bus: Bus, subjects: tuple[str, ...]) -> list[Event]:
    query = ReplayQuery(filter_subjects=subjects, start_sequence=1)
    return [record.message async for record in bus.replay_events(query)]


class Running:
    """A consumer of a router's deciders running in the background."""

    def __init__(self, bus: Bus, config: HostConfig = CONFIG) -> None:
        self.consumer = DeciderConsumer(bus, make_router().stages, config, first=(PLACEMENT,))
        self.task: asyncio.Task[object] | None = None

    async def __aenter__(self) -> DeciderConsumer:
        self.task = asyncio.create_task(self.consumer.run())
        await until(self._is_live)
        return self.consumer

    async def _is_live(self) -> bool:
        return self.consumer.stats.is_live

    async def __aexit__(self, *exc: object) -> None:
        self.consumer.stop()
        assert self.task is not None
        await self.task


async def finished(bus: Bus, rollout_id: str) -> list[Event]:
    return await read(bus, (rollout_subject(rollout_id, "finished"),))


async def test_decides_live_and_publishes_outputs(bus: Bus) -> None:
    async with Running(bus) as consumer:
        await bus.publish_many([*submitted("r1", 2), completed("r1", 0), completed("r1", 1)])

        async def is_finished() -> bool:
            return bool(await finished(bus, "r1"))

        await until(is_finished)
    (event,) = await finished(bus, "r1")
    assert isinstance(event, RolloutFinished) and event.num_completed == 2
    assert consumer.stats.num_decided >= 5 and consumer.stats.num_outputs >= 1


async def caught_up(bus: Bus, consumer: DeciderConsumer) -> bool:
    return consumer.stats.position >= (await bus.stream_state()).last_sequence


async def num_handled(bus: Bus, consumer: DeciderConsumer, up_to: int) -> int:
    """Events of the consumer's kinds stored up to stream sequence ``up_to``."""
    query = ReplayQuery(filter_subjects=consumer.filter_subjects, start_sequence=1)
    return len([r async for r in bus.replay_events(query) if r.stream_sequence <= up_to])


async def test_a_restart_replays_to_its_position_and_decides_the_rest_once(bus: Bus) -> None:
    async with Running(bus) as first:
        await bus.publish_many([*submitted("r1", 3), completed("r1", 0)])
        await until(lambda: caught_up(bus, first))
    # The repeated completion has the same id: the stream stores it once.
    await bus.publish_many([completed("r1", 1), completed("r1", 1), completed("r1", 2)])
    async with Running(bus) as second:
        await until(lambda: caught_up(bus, second))
    stored = first.stored_position
    assert second.stats.num_replayed == await num_handled(bus, first, stored)
    assert second.stats.num_decided >= 2  # the two new completions, not one replayed event
    (event,) = await finished(bus, "r1")
    assert isinstance(event, RolloutFinished) and event.num_completed == 3
    async with Running(bus) as third:  # nothing left to decide: no second RolloutFinished
        await until(lambda: caught_up(bus, third))
    total = (await bus.stream_state()).last_sequence
    folded = third.stats.num_replayed + third.stats.num_decided
    assert folded == await num_handled(bus, third, total)
    assert third.stats.num_outputs == 0
    assert len(await finished(bus, "r1")) == 1


async def _decided(consumer: DeciderConsumer, count: int) -> bool:
    return consumer.stats.num_decided >= count


async def test_a_new_consumer_adopts_the_past_without_deciding_it(bus: Bus) -> None:
    await bus.publish_many([*submitted("old", 1), completed("old", 0), *submitted("r2", 2)])
    async with Running(bus) as consumer:
        await bus.publish(completed("r2", 0))
        await bus.publish(completed("r2", 1))
        await until(lambda: _decided(consumer, 2))
    assert await finished(bus, "old") == []  # its end was the past's business
    assert len(await finished(bus, "r2")) == 1  # known from the adopted submission
    assert consumer.stats.num_replayed == 6


async def test_events_before_since_are_ignored(bus: Bus) -> None:
    await bus.publish_many(submitted("r1", 1))
    since = (await bus.stream_state()).last_sequence + 1
    config = HostConfig(fetch_wait_s=0.2, durable_prefix="isolated", since_sequence=since)
    async with Running(bus, config) as consumer:
        await bus.publish(completed("r1", 0))
        await until(lambda: _decided(consumer, 1))
    assert consumer.stats.num_replayed == 0
    assert await finished(bus, "r1") == []  # r1's submission is not this run's


async def test_refused_events_are_dead_lettered_and_work_goes_on(bus: Bus) -> None:
    async with Running(bus) as consumer:
        await bus.publish_many(
            [*submitted("bad", 1, policy="nope"), *submitted("ok", 1), completed("ok", 0)]
        )
        await bus.publish_raw("heddle.evt.rollout.x.submitted", b"{not json", "junk")
        await until(lambda: _decided(consumer, 5))

        async def has_letters() -> bool:
            return len(await read(bus, (DEADLETTER_SUBJECT,))) >= 2

        await until(has_letters)
    letters = await read(bus, (DEADLETTER_SUBJECT,))
    reasons = sorted(letter.reason for letter in letters if isinstance(letter, DeadLettered))
    assert any("nope" in reason for reason in reasons)
    assert any("malformed JSON" in reason for reason in reasons)
    assert len(await finished(bus, "ok")) == 1


class RunningPlane(Running):
    """The router's two stages and worker liveness on one consumer, as the control plane hosts
    them (placement deciding first)."""

    def __init__(self, bus: Bus) -> None:
        self.liveness = WorkerLiveness(timeout_s=10.0)
        stages = make_router().stages
        self.consumer = DeciderConsumer(bus, [*stages, self.liveness], CONFIG, first=(PLACEMENT,))
        self.task = None


async def durables(bus: Bus) -> set[str]:
    names = {"control-plane", "control-placement", f"control-{LATE}", "control-liveness"}
    return {name for name in names if await bus.consumer_state(EVENTS_STREAM, name)}


async def test_units_share_one_durable_and_each_decides_its_events(bus: Bus) -> None:
    running = RunningPlane(bus)
    async with running as consumer:
        opened = submitted("r1", 2, policy="heddle")
        await bus.publish_many([b.worker("w0", at=1.0), *opened, completed("r1", 0)])
        await bus.publish(completed("r1", 1))
        await until(lambda: _decided(consumer, 6))

        async def is_finished() -> bool:
            return bool(await finished(bus, "r1"))

        await until(is_finished)
        await until(lambda: _decided(consumer, 7))  # ... and its own RolloutFinished
    assert consumer.durable == "control-plane" and await durables(bus) == {"control-plane"}
    assert running.liveness.live_workers() == ["w0"]
    units = consumer.stats.units
    # Every stage folds every event the router handles, its own RolloutFinished included.
    assert units[LATE].num_decided == units[PLACEMENT].num_decided >= 7
    assert units[LATE].num_outputs >= 3  # two first predictions and the RolloutFinished
    assert units["liveness"].num_decided == 3  # registration and completions


async def test_an_event_refused_by_several_units_is_dead_lettered_once(bus: Bus) -> None:
    async with RunningPlane(bus) as consumer:
        await bus.publish_many([*submitted("bad", 1, policy="nope"), *submitted("ok", 1)])
        await until(lambda: _decided(consumer, 4))

        async def has_letter() -> bool:
            return bool(await read(bus, (DEADLETTER_SUBJECT,)))

        await until(has_letter)
        await asyncio.sleep(0.3)
    (letter,) = await read(bus, (DEADLETTER_SUBJECT,))
    assert isinstance(letter, DeadLettered) and "nope" in letter.reason
    assert letter.consumer == "control-plane"
    # Both stages refused the submission: one dead letter.
    units = consumer.stats.units
    assert units[LATE].num_rejected == units[PLACEMENT].num_rejected == 1
