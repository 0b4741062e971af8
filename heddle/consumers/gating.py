"""The event gate in front of the control plane's deciders, and what its verdicts call for.

``Screen`` puts every event the deciders' consumer takes through the pure gate
(``heddle.control.gate``) before any unit sees it, in stream order, live and in replay alike:

- a refused event reaches no unit; it is dead-lettered with the gate's reason (the pipeline's
  dead letters), and a writer whose hosting is over is told so with a ``Fence`` command;
- an accepted event that ends a trajectory slot (``Completed``, a final ``Failed``) is passed
  on, byte for byte (references to offloaded arrays included), to its owner's delivery stream
  ``HEDDLE_OUT_<trainer>``, subject ``heddle.out.<trainer>.<rollout>.<traj>.<kind>``, with a
  message id derived from the rollout and the trajectory: a batch decided again after a crash
  delivers the same ids, which the stream drops (its duplicate window is a day). The rollout's
  end (``finished``, ``cancelled``) follows its trajectories' records, on
  ``heddle.out.<trainer>.<rollout>.<kind>``. Trainers read that stream, never the workers' raw
  terminal events: a forged or stale end never reaches them.

Delivery streams are created as their trainers appear (a submission accepted live, or the first
record for a trainer since this process started), before the first record goes out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.bus import Bus, Delivery, Forward, Outgoing, Rejection
from heddle.bus.streams import DELIVERY_DUPLICATE_WINDOW_S, DELIVERY_MAX_AGE_S, delivery_stream_spec
from heddle.consumers.pipeline import Stage
from heddle.control.gate import EventGate
from heddle.control.leases import Refusal
from heddle.events import (
    Event,
    EventT,
    Fence,
    RolloutSubmitted,
    TrajectoryEvent,
)
from heddle.events.rollout import ROLLOUT_EVENTS
from heddle.events.subjects import delivery_subject, rollout_delivery_subject
from heddle.events.trajectory import TRAJECTORY_EVENTS
from heddle.ids import check_token, derive_id

log = logging.getLogger(__name__)

GATED: frozenset[type[Event]] = frozenset(TRAJECTORY_EVENTS) | frozenset(ROLLOUT_EVENTS)
"""What the gate reads beyond the units' kinds: every rollout and trajectory event (a lease
follows every step of its trajectory, whichever unit decides on them)."""


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

    def __init__(self, streams: DeliveryStreams | None = None, gate: EventGate | None = None):
        """``streams``: where deliveries go (None: nothing is delivered, e.g. in tests of the
        deciders alone)."""
        self.gate = gate if gate is not None else EventGate()
        self.streams = streams
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
                self.streams.want(event.trainer)
            if verdict.deliver_to and self.streams is not None:
                outputs.append(_record(delivery, verdict.deliver_to))
                self.num_delivered += 1
        return accepted, Stage(outputs, rejections)

    async def before_publish(self, outputs: Sequence[Outgoing]) -> None:
        """Make the delivery streams the outputs' records go to."""
        if self.streams is None:
            return
        trainers = {out.subject.split(".")[2] for out in outputs if isinstance(out, Forward)}
        if trainers:
            await self.streams.ready(trainers)


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
