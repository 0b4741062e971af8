"""What ``HeddleClient.completions`` reads and hands over: every trajectory's terminal record.

The control plane delivers, after its gate (``heddle.control.gate``) accepted it, the event
that ended each trajectory slot to the owner's stream ``HEDDLE_OUT_<trainer>``
(``heddle.controlplane.gating``), once per trajectory, and then the rollout's end
(``RolloutFinished`` or ``RolloutCancelled``). Workers' raw terminal events are never read, so a
forged, stale or duplicate end never reaches a trainer, and a trainer reads nothing but its own
stream (all its role allows). Both ends of a trajectory come as a ``Completed``: the control
plane delivers a failure as one (reward 0, the tokens generated before it; ``finish_reason``
and ``reason`` say why; a ``Failed`` delivered as it is, by a control plane that builds no
records, comes without its tokens), so a batch has a row for each trajectory slot. A stale
trajectory resubmitted afresh is not delivered: the trajectory that runs its slot again is, with
the same ``group_id`` and ``index``.

Also, for operators (whose role reads ``HEDDLE_EVENTS``): whether a rollout is over, and the
deployment's time scale, read from the workers' registrations.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from heddle.bus import Bus, ConsumerSpec, Delivery, ReplayQuery, TransientError
from heddle.events import (
    Completed,
    EventT,
    Failed,
    RolloutCancelled,
    RolloutFinished,
    WorkerRegistered,
    decode_event,
)
from heddle.events.subjects import (
    delivery_stream,
    delivery_subject,
    rollout_delivery_subject,
    rollout_subject,
    trainer_role,
)
from heddle.workers.agent.records import completed as completed_record
from heddle.workers.agent.trajectory_log import TrajectoryLog

_IDLE_CHECK_S = 0.5
_STREAM_POLL_S = 0.2
ACK_WAIT_S = 30.0
"""How long a trajectory handed to a trainer that went away without a word (killed, or its
connection lost with the delivery in transit) waits before it comes again. While the trainer
holds one, its runner tells the server every quarter of this that it still works on it
(``heddle.bus.message_runner``), so a trainer may hold a trajectory as long as it likes."""


def delivered_subjects(trainer: str, rollout_id: str) -> tuple[str, ...]:
    """What a trainer reads of one rollout: each trajectory's record
    (``heddle.out.<trainer>.<rollout>.<traj>.<kind>``) and the rollout's end
    (``heddle.out.<trainer>.<rollout>.<kind>``)."""
    return (f"{delivery_subject(trainer, rollout_id, '*', '*').rsplit('.', 2)[0]}.>",)


async def deployment_time_scale(bus: Bus) -> float | None:
    """The time scale the deployment's workers registered with (their latest registration);
    None when no worker registered. ``ValueError`` when workers disagree."""
    query = ReplayQuery(filter_subjects=("heddle.evt.worker.*.registered",), start_sequence=1)
    scales: dict[str, float] = {}
    async for record in bus.replay_events(query):
        if isinstance(record.message, WorkerRegistered):
            scales[record.message.worker_id] = record.message.time_scale
    distinct = sorted(set(scales.values()))
    if len(distinct) > 1:
        raise ValueError(f"the workers run at different time scales {distinct}: give time_scale")
    return distinct[0] if distinct else None


async def is_over(bus: Bus, rollout_id: str) -> bool:
    subjects = (rollout_subject(rollout_id, "finished"), rollout_subject(rollout_id, "cancelled"))
    query = ReplayQuery(filter_subjects=subjects, start_sequence=1)
    async for record in bus.replay_events(query):
        if isinstance(record.message, (RolloutFinished, RolloutCancelled)):
            return True
    return False


async def rollout_ended(bus: Bus, trainer: str, rollout_id: str) -> bool:
    """Whether the rollout's end was delivered to ``trainer``'s stream (what a trainer's role
    may read)."""
    stream = delivery_stream(trainer)
    if not await bus.has_stream(stream):
        return False
    subject = rollout_delivery_subject(trainer, rollout_id, "*")
    return await bus.num_matching_messages(stream, subject) > 0


def failure_alone(failed: Failed) -> Completed:
    """A delivered ``Failed`` as the trainer's ``Completed``, without the tokens before it (a
    control plane that builds the record delivers that instead)."""
    log = TrajectoryLog(rollout_id=failed.rollout_id, traj_id=failed.traj_id)
    record = completed_record(
        log,
        worker_id=failed.worker_id,
        reward=0.0,
        finish_reason=failed.finish_reason,
        time_scale=1.0,
        now=failed.occurred_at,
        reason=failed.reason,
    )
    return msgspec.structs.replace(record, group_id=failed.group_id, index=failed.index)


class CompletionStream:
    """Bridges the bus's message runner (one handler call at a time, acked when it returns)
    to an async iterator: the handler hands the delivery over and returns only when the caller
    asks for the next one (ack) or leaves (nak: it comes again)."""

    def __init__(
        self,
        bus: Bus,
        trainer: str,
        rollout_id: str,
        durable: str,
        *,
        ack_wait_s: float = ACK_WAIT_S,
    ) -> None:
        self.bus = bus
        self.trainer = trainer
        self.rollout_id = rollout_id
        self.is_over = False
        """The rollout's end was read (its records all came before it)."""
        self.spec = ConsumerSpec(
            durable=durable,
            stream=delivery_stream(trainer),
            filter_subjects=delivered_subjects(trainer, rollout_id),
            role=trainer_role(trainer),
            batch_size=1,
            max_ack_pending=1,
            ack_wait_s=ack_wait_s,
            nak_delay_s=0.0,
        )
        self._handed: asyncio.Queue[tuple[Delivery[EventT], asyncio.Future[bool]]] = asyncio.Queue()

    async def _handle(self, delivery: Delivery[EventT]) -> None:
        taken: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        await self._handed.put((delivery, taken))
        if not await taken:
            raise TransientError("the trainer left before taking it")

    async def __aiter__(self) -> AsyncIterator[Completed]:
        await self._stream_exists()
        runner = self.bus.message_runner(self.spec, decode_event, self._handle, max_concurrent=1)
        running = asyncio.create_task(runner.run())
        seen: set[str] = set()
        pending: asyncio.Future[bool] | None = None
        try:
            while True:
                item = await self._next(running)
                if item is None:
                    if await self._is_drained():
                        return
                    continue
                delivery, pending = item
                message = delivery.message
                if isinstance(message, Completed) and message.traj_id not in seen:
                    seen.add(message.traj_id)
                    # Arrays kept in the object store (a long trajectory) are read back here,
                    # digests checked: the trainer always gets the whole trajectory.
                    yield await self.bus.resolve(message)
                elif isinstance(message, Failed) and _is_new_end(message, seen):
                    seen.add(message.traj_id)
                    yield failure_alone(message)
                elif isinstance(message, RolloutFinished | RolloutCancelled):
                    self.is_over = True
                pending.set_result(True)
                pending = None
        finally:
            if pending is not None and not pending.done():
                pending.set_result(False)
            runner.stop()
            while not self._handed.empty():
                _, leftover = self._handed.get_nowait()
                if not leftover.done():
                    leftover.set_result(False)
            with contextlib.suppress(Exception):
                await running

    async def _next(
        self, running: asyncio.Task[Any]
    ) -> tuple[Delivery[EventT], asyncio.Future[bool]] | None:
        getter = asyncio.ensure_future(self._handed.get())
        done, _ = await asyncio.wait(
            {getter, running}, timeout=_IDLE_CHECK_S, return_when=asyncio.FIRST_COMPLETED
        )
        if not getter.done():
            getter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await getter
        if getter.done() and not getter.cancelled():
            return getter.result()
        if running in done:
            running.result()  # the runner failed: raise why
            raise RuntimeError("the completions consumer stopped")
        return None

    async def _is_drained(self) -> bool:
        """The rollout's end is in the stream and the consumer took everything: the end read
        now, or by an earlier reader of the same durable consumer (a trainer restarted after it
        took the whole rollout gets nothing again, and must not wait for an end it took)."""
        if not self.is_over and not await rollout_ended(self.bus, self.trainer, self.rollout_id):
            return False
        state = await self.bus.consumer_state(self.spec.stream, self.spec.durable)
        return state is not None and state.num_pending == 0 and state.num_ack_pending == 0

    async def _stream_exists(self) -> None:
        """Wait until the control plane made the trainer's stream (it does when it accepts the
        trainer's first submission)."""
        while True:
            if await self.bus.has_stream(self.spec.stream):
                return
            await asyncio.sleep(_STREAM_POLL_S)


def _is_new_end(failed: Failed, seen: set[str]) -> bool:
    return failed.is_final and failed.traj_id not in seen
