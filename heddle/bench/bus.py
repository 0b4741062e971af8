"""``heddle bench bus``: publish, raw pull, projection and replay rates of realistic step events.

One run publishes ``num_events`` Generated events (``num_tokens`` token ids and logprobs each,
spread over the trajectories of one new rollout, each announced by its step's
GenerationStarted, as workers do: the ledger's event gate projects a step only once it
started), then reads the same stream range four ways:
a raw pull (fetch + ack, no decoding, no SQL) and the ledger projection into a fresh SQLite
file (same client, same consumer settings), then ordered replay with the contract's decoder and
with the ledger's lean decoder. Last, the step events of a second rollout are published encoded
beforehand (``publish_encoded``): publishing without the encoding, the figure to hold against
``nats bench``'s publish of ready-made messages. The client's and (for an embedded server) the
server's CPU time
per event are reported with each rate, since on a shared machine wall-clock rates also measure
the neighbours.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heddle.bench.phases import Phase, measure_chunks, measure_phase, server_pid_of
from heddle.bus import Bus, ConsumerSpec, Delivery, ReplayQuery
from heddle.bus.publisher import Publisher
from heddle.config import Settings
from heddle.controlplane.projector import Projector, ProjectorConfig
from heddle.events import (
    Event,
    Generated,
    GenerationStarted,
    RolloutSubmitted,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
    decode_event,
    encode,
)
from heddle.events.subjects import (
    EVENTS_STREAM,
    EVENTS_SUBJECTS,
    LEDGER_PROJECTOR_ROLE,
    subject_for_event,
)
from heddle.ids import derive_id, trajectory_id
from heddle.ledger.database import open_ledger
from heddle.ledger.lean_decoder import decode_event_lean

_NUM_TOKEN_POOLS = 16
ENCODED_CHUNK = 4096
"""Events built (and, for the pre-encoded phase, encoded) ahead of each timed publish."""


@dataclass(frozen=True, slots=True)
class BusBenchConfig:
    num_events: int = 200_000
    """Generated (step) events to publish."""
    num_trajectories: int = 500
    num_tokens: int = 256
    """Token ids (and logprobs) per step event."""
    batch_size: int = 1000
    """Messages per fetch and events per ledger transaction."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_events < 1 or self.num_trajectories < 1 or self.num_tokens < 0:
            raise ValueError("need events >= 1, trajectories >= 1 and tokens >= 0")
        if self.batch_size < 1:
            raise ValueError("batch size must be >= 1")


@dataclass(frozen=True, slots=True)
class BusBenchResult:
    rollout_id: str
    payload_bytes: int
    """Encoded size of one step event."""
    publish: Phase
    raw_pull: Phase
    projection: Phase
    replay: Phase
    replay_lean: Phase
    publish_encoded: Phase
    """The same step events, encoded beforehand: the bus's publish path alone."""

    def as_dict(self) -> dict[str, Any]:
        raw = self.raw_pull.events_per_s
        return {
            "rollout_id": self.rollout_id,
            "payload_bytes": self.payload_bytes,
            "cpu_count": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "publish_events_per_s": round(self.publish.events_per_s, 1),
            "publish_encoded_events_per_s": round(self.publish_encoded.events_per_s, 1),
            "raw_pull_events_per_s": round(raw, 1),
            "projection_events_per_s": round(self.projection.events_per_s, 1),
            "projection_to_raw": round(self.projection.events_per_s / raw, 3) if raw else None,
            "replay_events_per_s": round(self.replay.events_per_s, 1),
            "replay_lean_events_per_s": round(self.replay_lean.events_per_s, 1),
            "phases": {
                "publish": self.publish.as_dict(),
                "raw_pull": self.raw_pull.as_dict(),
                "projection": self.projection.as_dict(),
                "replay": self.replay.as_dict(),
                "replay_lean": self.replay_lean.as_dict(),
                "publish_encoded": self.publish_encoded.as_dict(),
            },
        }


async def run_bus_bench(settings: Settings, config: BusBenchConfig) -> BusBenchResult:
    rollout_id = f"bench-{uuid.uuid4().hex[:10]}"
    async with Bus(settings) as bus:
        server_pid = server_pid_of(settings)
        events = _events(rollout_id, config)
        publish, first, last = await _publish(bus, events, server_pid)
        gc.collect()
        gc.freeze()
        spec = ConsumerSpec(
            durable=f"{rollout_id}-raw",
            stream=EVENTS_STREAM,
            filter_subjects=(EVENTS_SUBJECTS,),
            role=LEDGER_PROJECTOR_ROLE,  # the projector's reading, measured without SQL
            batch_size=config.batch_size,
            max_ack_pending=2 * config.batch_size,
            ack_all=True,
            start_sequence=first,
            fetch_wait_s=0.2,
        )
        raw = await measure_phase(lambda: _raw_pull(bus, spec), server_pid)
        await bus.delete_consumer(EVENTS_STREAM, spec.durable)
        projection = await measure_phase(
            lambda: _project(bus, settings.data_dir, rollout_id, first, config), server_pid
        )
        query = ReplayQuery(
            (EVENTS_SUBJECTS,), start_sequence=first, end_sequence=last, batch_size=1000
        )
        replay = await measure_phase(lambda: _replay(bus, query, decode_event), server_pid)
        lean = await measure_phase(lambda: _replay(bus, query, decode_event_lean), server_pid)
        gc.unfreeze()
        # Last: its events follow the range the phases above read.
        encoded = await _publish_encoded(bus, f"{rollout_id}-encoded", config, server_pid)
    return BusBenchResult(
        rollout_id,
        len(encode(_step(rollout_id, config, 0))),
        publish,
        raw,
        projection,
        replay,
        lean,
        encoded,
    )


async def _publish(
    bus: Bus, events: Iterator[Event], server_pid: int | None
) -> tuple[Phase, int, int]:
    """Publish the events through the bus: the phase, first and last sequence."""
    sequences: list[int] = []

    async def publish(chunk: list[Event]) -> int:
        acks = await bus.publish_many(chunk)
        sequences.extend((acks[0].sequence, acks[-1].sequence))
        return len(acks)

    phase = await measure_chunks(events, ENCODED_CHUNK, publish, server_pid)
    return phase, sequences[0], sequences[-1]


async def _publish_encoded(
    bus: Bus, rollout_id: str, config: BusBenchConfig, server_pid: int | None
) -> Phase:
    """Publish a rollout's step events, encoded beforehand, through a publisher on the bus's
    connection: what publishing costs without encoding."""
    envelopes = (
        (subject_for_event(event), encode(event), event.event_id)
        for event in _events(rollout_id, config)
    )
    publisher = await Publisher(bus.client).open()
    try:

        async def publish(chunk: list[tuple[str, bytes, str]]) -> int:
            return len(await publisher.publish_many(chunk))

        return await measure_chunks(envelopes, ENCODED_CHUNK, publish, server_pid)
    finally:
        await publisher.close()


async def _raw_pull(bus: Bus, spec: ConsumerSpec) -> int:
    async def count(batch: list[Delivery[bytes]]) -> None:
        return None

    stats = await bus.batch_runner(spec, bytes, count).run(until_idle=True)
    return stats.num_fetched


async def _project(
    bus: Bus, data_dir: Path, rollout_id: str, first: int, config: BusBenchConfig
) -> int:
    path = data_dir / "bench" / f"{rollout_id}.db"
    ledger = open_ledger(f"sqlite:///{path}")
    consumer = f"{rollout_id}-ledger"
    try:
        projector_config = ProjectorConfig(
            consumer=consumer,
            batch_size=config.batch_size,
            fetch_wait_s=0.2,
            first_sequence=first,
        )
        stats = await Projector(bus, ledger, projector_config).run(until_idle=True)
        return stats.num_projected
    finally:
        ledger.close()
        await bus.delete_consumer(EVENTS_STREAM, consumer)
        await asyncio.to_thread(_remove_sqlite, path)


async def _replay(bus: Bus, query: ReplayQuery, decode: Callable[[bytes], Any]) -> int:
    reader = bus.replay(query, decode)
    async for _batch in reader.batches():
        pass
    return reader.num_read


def _events(rollout_id: str, config: BusBenchConfig) -> Iterator[Event]:
    yield RolloutSubmitted(
        event_id=derive_id(rollout_id, "submitted"),
        rollout_id=rollout_id,
        occurred_at=time.time(),
        policy="heddle",
        num_trajectories=config.num_trajectories,
        source="bench:bus",
    )
    for index in range(config.num_trajectories):
        yield TrajectorySubmitted(
            event_id=derive_id(rollout_id, trajectory_id(index), "submitted"),
            rollout_id=rollout_id,
            traj_id=trajectory_id(index),
            occurred_at=time.time(),
            spec=TrajectorySpec(group_id=f"g{index // 8}", index=index, environment="trace"),
        )
    for index in range(config.num_trajectories):
        yield TrajectoryPlaced(
            event_id=derive_id(rollout_id, trajectory_id(index), "placed"),
            rollout_id=rollout_id,
            traj_id=trajectory_id(index),
            occurred_at=time.time(),
            worker_id=_worker(index),
            epoch=1,
        )
    for number in range(config.num_events):
        yield _started(rollout_id, config, number)
        yield _step(rollout_id, config, number)


def _worker(traj_index: int) -> str:
    return f"w{traj_index % 8:02d}"


def _started(rollout_id: str, config: BusBenchConfig, number: int) -> GenerationStarted:
    """The announcement of the ``number``-th step (no tool call between steps)."""
    traj_index = number % config.num_trajectories
    step = number // config.num_trajectories
    return GenerationStarted(
        event_id=derive_id(rollout_id, trajectory_id(traj_index), step, "generation_started"),
        rollout_id=rollout_id,
        traj_id=trajectory_id(traj_index),
        occurred_at=1_700_000_000.0 + number * 1e-3,
        step=step,
        worker_id=_worker(traj_index),
        num_context_tokens=1024 + step * config.num_tokens,
        epoch=1,
    )


def _step(rollout_id: str, config: BusBenchConfig, number: int) -> Generated:
    """The ``number``-th step event: trajectories take turns, one step each."""
    pools = _token_pools(config.num_tokens, config.seed)
    token_ids, logprobs = pools[number % len(pools)]
    traj_index = number % config.num_trajectories
    traj = trajectory_id(traj_index)
    step = number // config.num_trajectories
    return Generated(
        event_id=derive_id(rollout_id, traj, step, "generated"),
        rollout_id=rollout_id,
        traj_id=traj,
        occurred_at=1_700_000_000.0 + number * 1e-3,
        step=step,
        worker_id=_worker(traj_index),
        epoch=1,
        output_token_ids=token_ids,
        output_logprobs=logprobs,
        finish_reason="tool_call",
        num_context_tokens=1024 + (step + 1) * config.num_tokens,
        queue_s=0.01,
        prefill_s=0.02,
        decode_s=0.5,
    )


@functools.cache
def _token_pools(num_tokens: int, seed: int) -> list[tuple[list[int], list[float]]]:
    """A few random token lists reused across events (realistic sizes without the cost of
    generating millions of random numbers)."""
    rng = random.Random(seed)
    return [
        (
            [rng.randrange(151_936) for _ in range(num_tokens)],
            [-rng.expovariate(1.5) for _ in range(num_tokens)],
        )
        for _ in range(_NUM_TOKEN_POOLS)
    ]


def _remove_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
