"""What a trainer's plain durable consumer receives: the chaos bench's exactly-once check, made
where trainers read (the delivery stream ``HEDDLE_OUT_<trainer>``), not through the client."""

from __future__ import annotations

from collections import Counter

from heddle.bus import Bus, ConsumerSpec, Delivery
from heddle.events import Completed, EventT, Failed, decode_event
from heddle.events.subjects import delivery_stream, delivery_subjects, trainer_role


async def delivered(bus: Bus, trainer: str, durable: str) -> Counter[tuple[str, str]]:
    """Records per (rollout, trajectory) on a durable pull consumer of the trainer's stream,
    from its first message (explicit acks, like docs/trainer.md's plain-NATS trainer)."""
    received: Counter[tuple[str, str]] = Counter()

    async def take(batch: list[Delivery[EventT]]) -> None:
        for delivery in batch:
            record = delivery.message
            if isinstance(record, Completed | Failed):
                received[(record.rollout_id, record.traj_id)] += 1

    spec = ConsumerSpec(
        durable=durable,
        stream=delivery_stream(trainer),
        filter_subjects=(delivery_subjects(trainer),),
        role=trainer_role(trainer),
        fetch_wait_s=0.5,
    )
    await bus.batch_runner(spec, decode_event, take).run(until_idle=True)
    return received
