"""What ``HeddleClient.completions`` reads and hands over: every trajectory's terminal event.

A trajectory ends with ``Completed`` or with a final ``Failed`` (``Failed.is_final``); the stream
hands both to the trainer as a ``Completed`` (a failure's tokens are those generated before it,
rebuilt from the trajectory's events; ``finish_reason`` and ``reason`` say why), so a batch has a
row for each trajectory slot. A stale trajectory resubmitted afresh (``resubmitted_as``) is not
handed over: the trajectory that runs its slot again is, with the same ``group_id`` and
``index``. Also: the deployment's time scale, read from the workers' registrations.
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
    RolloutSubmitted,
    WorkerRegistered,
    decode_event,
)
from heddle.events.subjects import (
    EVENTS_STREAM,
    completions_subject,
    rollout_subject,
    trajectory_subject,
)
from heddle.workers.agent.history import rebuild
from heddle.workers.agent.records import completed as completed_record

_IDLE_CHECK_S = 0.5


def terminal_subjects(rollout_id: str) -> tuple[str, ...]:
    """The subjects a trainer reads: every trajectory's ``completed`` and ``failed``."""
    return (completions_subject(rollout_id), trajectory_subject(rollout_id, "*", "failed"))


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


async def _rollout_events(bus: Bus, subject: str) -> list[EventT]:
    query = ReplayQuery(filter_subjects=(subject,), start_sequence=1)
    return [record.message async for record in bus.replay_events(query)]


async def is_over(bus: Bus, rollout_id: str) -> bool:
    subjects = (rollout_subject(rollout_id, "finished"), rollout_subject(rollout_id, "cancelled"))
    query = ReplayQuery(filter_subjects=subjects, start_sequence=1)
    async for record in bus.replay_events(query):
        if isinstance(record.message, (RolloutFinished, RolloutCancelled)):
            return True
    return False


async def completion_of_failure(bus: Bus, failed: Failed) -> Completed:
    """A terminal ``Failed`` as the trainer's ``Completed``: reward 0, the tokens of its events,
    its terminal reason, its group and index (from its spec when the event lacks them)."""
    events = await _rollout_events(bus, trajectory_subject(failed.rollout_id, failed.traj_id, ">"))
    log = rebuild(failed.rollout_id, failed.traj_id, [e for e in events if e is not failed])
    submitted = await _rollout_events(bus, rollout_subject(failed.rollout_id, "submitted"))
    scale = next((e.time_scale for e in submitted if isinstance(e, RolloutSubmitted)), 1.0)
    record = completed_record(
        log,
        reward=0.0,
        finish_reason=failed.finish_reason,
        time_scale=scale,
        now=failed.occurred_at,
        reason=failed.reason,
    )
    if log.spec is None:  # never submitted (its submission was dead-lettered): the event's
        record = msgspec.structs.replace(record, group_id=failed.group_id, index=failed.index)
    return record


class CompletionStream:
    """Bridges the bus's message runner (one handler call at a time, acked when it returns)
    to an async iterator: the handler hands the delivery over and returns only when the caller
    asks for the next one (ack) or leaves (nak: it comes again)."""

    def __init__(self, bus: Bus, rollout_id: str, durable: str) -> None:
        self.bus = bus
        self.rollout_id = rollout_id
        self.spec = ConsumerSpec(
            durable=durable,
            stream=EVENTS_STREAM,
            filter_subjects=terminal_subjects(rollout_id),
            batch_size=1,
            max_ack_pending=1,
            ack_wait_s=300.0,
            nak_delay_s=0.0,
        )
        self._handed: asyncio.Queue[tuple[Delivery[EventT], asyncio.Future[bool]]] = asyncio.Queue()

    async def _handle(self, delivery: Delivery[EventT]) -> None:
        taken: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        await self._handed.put((delivery, taken))
        if not await taken:
            raise TransientError("the trainer left before taking it")

    async def __aiter__(self) -> AsyncIterator[Completed]:
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
                    yield await completion_of_failure(self.bus, message)
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
        if not await is_over(self.bus, self.rollout_id):
            return False
        state = await self.bus.consumer_state(EVENTS_STREAM, self.spec.durable)
        return state is not None and state.num_pending == 0 and state.num_ack_pending == 0


def _is_new_end(failed: Failed, seen: set[str]) -> bool:
    return failed.is_final and failed.traj_id not in seen
