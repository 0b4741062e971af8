"""The event gate in front of the control plane's deciders, and what its verdicts call for.

``Screen`` puts every event the deciders' consumer takes through the pure gate
(``heddle.control.gate``) before any unit sees it, in stream order, live and in replay alike:

- a refused event reaches no unit; it is dead-lettered with the gate's reason (the pipeline's
  dead letters), and a writer whose hosting is over is told so with a ``Fence`` command;
- an accepted event that ends a trajectory slot is delivered to its owner's stream
  ``HEDDLE_OUT_<trainer>``, subject ``heddle.out.<trainer>.<rollout>.<traj>.<kind>``, with a
  message id derived from the rollout and the trajectory: a batch decided again after a crash
  delivers the same ids, which the stream drops (its duplicate window is a day). A ``Completed``
  is passed on byte for byte (references to offloaded arrays included); a final ``Failed`` goes
  as the ``Completed`` a trainer batches (reward 0, the tokens generated before it, its
  reason), built from the trajectory's events by ``TrainerRecords.failure`` (kind ``failed``).
  The rollout's end (``finished``, ``cancelled``) follows its trajectories' records, on
  ``heddle.out.<trainer>.<rollout>.<kind>``. Trainers read that stream, never
  ``HEDDLE_EVENTS``: a forged or stale end never reaches them, and a trainer's credential
  reads nothing of another's.

Delivery streams are created as their trainers appear (a submission accepted live, or the first
record for a trainer since this process started), before the first record goes out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from heddle.bus import Bus, Delivery, Forward, Outgoing, Rejection, Rerouted, Stage
from heddle.bus.streams import DELIVERY_DUPLICATE_WINDOW_S, DELIVERY_MAX_AGE_S, delivery_stream_spec
from heddle.control.gate import EventGate
from heddle.control.leases import Refusal
from heddle.events import (
    Completed,
    DeadLettered,
    Event,
    EventT,
    Failed,
    Fence,
    RolloutSubmitted,
    TrajectoryAbortRequested,
    TrajectoryEvent,
    decode_event,
)
from heddle.events.rollout import DEFAULT_TRAINER, ROLLOUT_EVENTS
from heddle.events.subjects import delivery_subject, rollout_delivery_subject
from heddle.events.trajectory import TRAJECTORY_EVENTS
from heddle.ids import check_token, derive_id

log = logging.getLogger(__name__)

GATED: frozenset[type[Event]] = (
    frozenset(TRAJECTORY_EVENTS)
    | frozenset(ROLLOUT_EVENTS)
    | {TrajectoryAbortRequested, DeadLettered}
)
"""What the gate reads beyond the units' kinds: every rollout and trajectory event (a lease
follows every step of its trajectory, whichever unit decides on them), the abort requests and
the control plane's dead letters (after which the control plane may fail a trajectory no worker
holds)."""


FailureRecord = Callable[[Bus, Failed], Awaitable[Completed]]
"""A final ``Failed`` as the trainer's ``Completed``, rebuilt from the trajectory's events."""
SummaryReply = Callable[[Bus, str], Awaitable[bytes]]
"""A rollout's summary (``heddle.rollout.summary.RolloutSummary``), encoded as JSON."""


@dataclass(frozen=True, slots=True)
class TrainerRecords:
    """What the control plane reads from ``HEDDLE_EVENTS`` for its trainers, whose role reads
    only their delivery stream: functions of higher layers, given by whoever starts the
    control plane (``heddle.rollout.trainer_records.TRAINER_RECORDS``)."""

    failure: FailureRecord
    summary: SummaryReply


@dataclass(frozen=True, slots=True)
class DeliveryConfig:
    max_age_s: float = DELIVERY_MAX_AGE_S
    """How long a trainer's stream keeps a record (its ``max_age``; 0: until deleted)."""
    duplicate_window_s: float = DELIVERY_DUPLICATE_WINDOW_S
    """How long a re-delivered record's id is recognised as a duplicate."""


class DeliveryStreams:
    """Creates each trainer's delivery stream once per process, in the background."""

    def __init__(self, bus: Bus, config: DeliveryConfig) -> None:
        self.bus = bus
        self.config = config
        self._made: dict[str, asyncio.Task[None]] = {}

    def want(self, trainer: str) -> None:
        """Start creating ``trainer``'s stream unless it was (a failure is retried later)."""
        task = self._made.get(trainer)
        if task is not None and not (task.done() and task.exception() is not None):
            return
        spec = delivery_stream_spec(trainer, self.config.max_age_s, self.config.duplicate_window_s)
        self._made[trainer] = asyncio.get_running_loop().create_task(
            self.bus.provision_stream(spec), name=f"delivery-stream-{trainer}"
        )

    async def ready(self, trainers: set[str]) -> None:
        """Return once the streams of ``trainers`` exist (raises why one cannot be made)."""
        for trainer in trainers:
            self.want(trainer)
        await asyncio.gather(*(self._made[trainer] for trainer in trainers))


class Screen:
    """The gate of one deciders' consumer (owned by it: replay, then live, in stream order)."""

    def __init__(
        self,
        streams: DeliveryStreams | None = None,
        gate: EventGate | None = None,
        failure: FailureRecord | None = None,
    ):
        """``streams``: where deliveries go (None: nothing is delivered, e.g. in tests of the
        deciders alone); ``failure``: how a failed trajectory's record is built (None: the
        ``Failed`` is passed on as it is)."""
        self.gate = gate if gate is not None else EventGate()
        self.streams = streams
        self.failure = failure
        self.num_refused = 0
        self.num_delivered = 0

    def fold(self, event: EventT) -> bool:
        """Replay: fold ``event`` in; whether it was accepted (outputs were sent the first
        time)."""
        return self.gate.admit(event).is_accepted

    def screen(self, batch: Sequence[Delivery[EventT]]) -> tuple[list[Delivery[EventT]], Stage]:
        """The accepted deliveries, and a stage of the fences and records to send and the
        refused events to dead-letter."""
        accepted: list[Delivery[EventT]] = []
        outputs: list[Outgoing] = []
        rejections: list[Rejection] = []
        for delivery in batch:
            event = delivery.message
            verdict = self.gate.admit(event)
            if verdict.refusal is not None:
                self.num_refused += 1
                rejections.append(Rejection(delivery, f"refused: {verdict.refusal.reason}"))
                outputs += _fence(event, verdict.refusal)
                continue
            accepted.append(delivery)
            if isinstance(event, RolloutSubmitted) and self.streams is not None:
                self.streams.want(event.trainer or DEFAULT_TRAINER)
            if verdict.deliver_to and self.streams is not None:
                outputs.append(_record(delivery, verdict.deliver_to))
                self.num_delivered += 1
        return accepted, Stage(outputs, rejections)

    async def prepare(self, outputs: Sequence[Outgoing]) -> Sequence[Outgoing]:
        """The outputs to publish: failed trajectories' records built, and the delivery
        streams they go to made."""
        if self.streams is None:
            return outputs
        records = [out for out in outputs if isinstance(out, Forward)]
        trainers = {out.subject.split(".")[2] for out in records}
        if trainers:
            await self.streams.ready(trainers)
        failures = [out for out in records if _is_failure_record(out)]
        if not failures or self.failure is None:
            return outputs
        bus, build = self.streams.bus, self.failure
        built = await asyncio.gather(*(build(bus, _failed(out)) for out in failures))
        rebuilt: dict[int, Outgoing] = {
            id(out): Rerouted(out.subject, record, out.message_id)
            for out, record in zip(failures, built, strict=True)
        }
        return [rebuilt.get(id(out), out) for out in outputs]


def _is_failure_record(record: Forward) -> bool:
    """A trajectory's record of kind ``failed``: ``heddle.out.<trainer>.<r>.<t>.failed``."""
    parts = record.subject.split(".")
    return len(parts) == 6 and parts[-1] == "failed"


def _failed(record: Forward) -> Failed:
    event = decode_event(record.data)
    assert isinstance(event, Failed), record.subject
    return event


def _record(delivery: Delivery[EventT], trainer: str) -> Forward:
    """The stored event passed on to the trainer's stream (a trajectory's end or the
    rollout's)."""
    event = delivery.message
    kind = type(event).kind_name()
    if isinstance(event, TrajectoryEvent):
        subject = delivery_subject(trainer, event.rollout_id, event.traj_id, kind)
        message_id = derive_id(event.rollout_id, event.traj_id, "delivered")
    else:
        subject = rollout_delivery_subject(trainer, event.rollout_id, kind)
        message_id = derive_id(event.rollout_id, "end", "delivered")
    return Forward(subject, delivery.data, message_id)


def _fence(event: EventT, refusal: Refusal) -> list[Outgoing]:
    """The ``Fence`` telling a stale writer its hosting is over (none for a writer whose id
    cannot be a subject token: no worker has it)."""
    if not refusal.fenced_worker or not isinstance(event, TrajectoryEvent):
        return []
    try:
        check_token(refusal.fenced_worker, "worker id")
    except ValueError:
        return []
    return [
        Fence(
            command_id=derive_id(event.event_id, "fence", refusal.fenced_worker),
            rollout_id=event.rollout_id,
            issued_at=event.occurred_at,
            worker_id=refusal.fenced_worker,
            traj_id=event.traj_id,
            epoch=refusal.fenced_epoch,
            reason=refusal.reason,
        )
    ]
