"""The worker's publishing: a lost connection is retried with the same ids, a refusal by the
server's permissions is not, and a worker that closes (SIGTERM) stops retrying, whether it is
waiting to try again or in the middle of an attempt."""

from __future__ import annotations

import asyncio
import time

import pytest

from heddle.bus import Delivery, InvalidMessage, PublishDenied, PublishError
from heddle.bus.transient import is_transient
from heddle.events import (
    Event,
    MigrateIn,
    ToolCall,
    TrajectorySpec,
    WorkerCommand,
    WorkerHeartbeat,
    WorkerTelemetry,
)
from heddle.events.subjects import subject_for_command
from heddle.events.worker import WorkerDrained
from heddle.workers.agent.errors import WorkerStopping
from heddle.workers.agent.publisher import DurablePublisher
from heddle.workers.agent.transport import CommandDispatcher


class FailingSink:
    """Every publish fails with ``error`` (or never returns, with ``hang``)."""

    def __init__(self, error: Exception | None = None, *, hang: bool = False) -> None:
        self.error = error
        self.hang = hang
        self.attempts = 0
        self._attempted = asyncio.Event()

    async def attempted(self, count: int) -> None:
        """Until ``count`` attempts were made."""
        while self.attempts < count:
            self._attempted.clear()
            await self._attempted.wait()

    async def publish(self, message: Event | WorkerCommand | ToolCall) -> None:
        self.attempts += 1
        self._attempted.set()
        if self.hang:
            await asyncio.Event().wait()
        assert self.error is not None
        raise self.error

    async def publish_telemetry(self, telemetry: WorkerTelemetry | WorkerHeartbeat) -> None:
        raise AssertionError("not used")


def drained() -> WorkerDrained:
    return WorkerDrained(event_id="e1", occurred_at=time.time(), worker_id="w00")


def test_a_permission_refusal_is_not_transient() -> None:
    denied = PublishDenied("heddle.cmd.worker.w01.migrate_in", "permissions violation")
    assert not is_transient(denied)
    assert is_transient(PublishError("heddle.evt.x", "not acknowledged"))
    assert is_transient(TimeoutError())


async def test_a_refused_publish_is_raised_at_once() -> None:
    denied = PublishDenied("heddle.evt.worker.w00.drained", "permissions violation")
    sink = FailingSink(denied)
    publisher = DurablePublisher(sink)
    with pytest.raises(PublishDenied):
        await asyncio.wait_for(publisher.publish(drained()), timeout=30)
    assert sink.attempts == 1


async def test_closing_ends_a_publish_waiting_to_retry() -> None:
    sink = FailingSink(PublishError("heddle.evt.x", "not acknowledged"))
    publisher = DurablePublisher(sink, max_retry_s=60.0)
    publishing = asyncio.create_task(publisher.publish(drained()))
    await asyncio.wait_for(sink.attempted(3), timeout=30)
    publisher.close()
    with pytest.raises(WorkerStopping):
        await asyncio.wait_for(publishing, timeout=30)


async def test_closing_ends_an_attempt_in_flight() -> None:
    """A bus publish may wait up to its retry deadline (a minute) for an acknowledgement."""
    sink = FailingSink(hang=True)
    publisher = DurablePublisher(sink)
    publishing = asyncio.create_task(publisher.publish(drained()))
    await asyncio.wait_for(sink.attempted(1), timeout=30)
    publisher.close()
    with pytest.raises(WorkerStopping):
        await asyncio.wait_for(publishing, timeout=30)
    assert not publishing.cancelled()


async def test_a_cancelled_caller_stays_cancelled() -> None:
    sink = FailingSink(hang=True)
    publisher = DurablePublisher(sink)
    publishing = asyncio.create_task(publisher.publish(drained()))
    await asyncio.wait_for(sink.attempted(1), timeout=30)
    publishing.cancel()
    publisher.close()
    with pytest.raises(asyncio.CancelledError):
        await publishing


class ResolvingBus:
    """The one bus method the dispatcher calls before the check (no arrays offloaded)."""

    async def resolve(self, message: MigrateIn) -> MigrateIn:
        return message


class TargetAgent:
    worker_id = "w01"

    async def handle(self, command: object, **_: object) -> None:
        raise AssertionError("a refused hand-over reached the agent")


async def test_a_hand_over_whose_sender_is_not_its_source_is_refused() -> None:
    """The sender is what the server's permissions vouch for (the subject's last token)."""
    spec = TrajectorySpec(group_id="g", index=0, environment="trace")
    command = MigrateIn(
        command_id="c",
        rollout_id="r",
        issued_at=1.0,
        worker_id="w01",
        traj_id="t",
        spec=spec,
        source_worker_id="w00",
        migration_id="m",
        sent_by="w02",
    )
    delivery = Delivery(command, subject_for_command(command), 1, 1, 0, b"", "")
    dispatcher = CommandDispatcher(TargetAgent(), ResolvingBus())  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="hand-over from 'w00' sent by 'w02'"):
        await dispatcher(delivery)
