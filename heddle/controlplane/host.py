"""Decider units on one durable JetStream pull consumer: replay, then decide live.

The control plane hosts all its units (the router's stages, ``heddle.control.bundle_router``, worker
liveness, the operators' view and weights) on ONE durable, ``<prefix>-plane``: each event is
fetched, decoded and acknowledged once and handed in stream order to every unit that handles it.
Measured on the acceptance rollout (128 coding trajectories, 4 sim workers, 100x), the six
durables it replaced (one per unit) cost the control plane ~205 us of CPU per event, most of it
decoding the same event up to six times and reading and acknowledging six deliveries of it (a
``Completed`` is ~470 KB); see docs/benchmarks.md for the figures after. A consumer of a single
unit (tests) is named after that unit: ``<prefix>-<slot>``.

Units are independent (each owns its state), so a batch is decided unit by unit, each unit
seeing the batch's events in stream order; the units named ``first`` (the router's stage of the
placement decider) decide the whole batch in a stage of their own, whose outputs go out before
the other units decide: a step's ``ContinueTrajectory`` never waits for predictions of the same
batch. A unit that refuses an event (raises) does not stop the others from deciding it; the
event is dead-lettered once.

Lifecycle of ``DeciderConsumer.run()``:

1. **Position.** The durable's ack floor, or the position recorded apart from it, or the stream's
   end for a durable never recorded (``heddle.controlplane.durable_position``).
2. **Replay.** Every event of the units' kinds up to that position is decoded once and folded
   into each unit that handles it, outputs discarded (they were published the first time): the
   state is rebuilt exactly as the simulator would have built it from the same events.
3. **Live.** The durable is recreated at position + 1 (so the unacknowledged tail is delivered
   at once, whatever the server's redelivery timers say) and driven by
   ``heddle.bus.PipelinedRunner``: each batch is decided in stream order as soon
   as it arrives, the ``first`` units' outputs (the router's) go out before the other units
   decide, every output is published with ids derived from its input (a re-run after a crash
   stores nothing twice), and batches are acknowledged in order, each only once its outputs are
   stored.

With a ``Screen`` (``heddle.controlplane.gating``, the control plane's), every event first passes
the event gate, live and in replay: a refused one reaches no unit and is dead-lettered with the
reason, a stale writer gets a ``Fence``, and an accepted end of a trajectory slot is delivered to
its trainer's stream; these go out in a stage of their own, before the units'.

A durable that disappears while live (``DurableLost``: every event taken from it is decided and
stored) is recreated after the last of them, and deciding goes on from the same state: nothing
is replayed, and nothing published meanwhile is skipped.

A delivery at or below the position is a redelivery of an event already decided (an ack lost in
a reconnect): it is acknowledged without deciding it again. An event a unit refuses (a
submission naming no bundle, or a decider raising) is dead-lettered and the others still decide
it; in replay the same event is skipped the same way. Outputs that cannot be published within
the bus's retry deadline stop the consumer with ``ConsumerFailed``: its state is ahead of what
is stored, so the host rebuilds it from the stream rather than go on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterator,
    Sequence,
)
from typing import Protocol, cast

from heddle.bus import (
    Bus,
    ConsumerSpec,
    Delivery,
    DurableLost,
    Outgoing,
    PipelinedRunner,
    Rejection,
    ReplayQuery,
    ReplayRecord,
    Stage,
)
from heddle.control import Output
from heddle.control.bundle_router import UnknownPolicy
from heddle.control.decider import dispatch_table
from heddle.controlplane.consumer_stats import ConsumerStats, UnitStats
from heddle.controlplane.decider_decoders import decoder_for
from heddle.controlplane.durable_position import note_lost, start_position
from heddle.controlplane.filters import filter_subjects
from heddle.controlplane.gating import GATED, Screen
from heddle.controlplane.plane_config import HostConfig
from heddle.events import Event, EventT, WorkerCommand
from heddle.events.subjects import CONTROL_PLANE_ROLE, EVENTS_STREAM
from heddle.observability.metrics import BatchObserver

log = logging.getLogger(__name__)

PLANE = "plane"
"""Durable suffix of a consumer hosting several units (``<prefix>-plane``)."""

__all__ = ["PLANE", "ConsumerStats", "DeciderConsumer", "Hosted", "UnitStats"]


class Hosted(Protocol):
    """What a consumer hosts: a router's stage (``heddle.control.bundle_router``), liveness, ..."""

    @property
    def slot(self) -> str: ...

    @property
    def handles(self) -> frozenset[type[Event]]: ...

    def decide(self, event: Event) -> list[Output]: ...


class DeciderConsumer:
    """Hosts decider units (one, or the whole control plane) on one durable consumer."""

    def __init__(
        self,
        bus: Bus,
        units: Hosted | Sequence[Hosted],
        config: HostConfig | None = None,
        *,
        first: Collection[str] = (),
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
        on_batch: BatchObserver | None = None,
        screen: Screen | None = None,
    ) -> None:
        """``first``: units whose outputs go out before the others decide the same batch;
        ``screen``: the event gate every event passes first (None: none)."""
        hosted = list(units) if isinstance(units, Sequence) else [units]
        names = [unit.slot for unit in hosted]
        if not hosted or len(set(names)) != len(names):
            raise ValueError(f"a consumer hosts units of distinct slots, got {names}")
        self.bus = bus
        self.config = config = config or HostConfig()
        self.durable = config.durable(hosted[0].slot if len(hosted) == 1 else PLANE)
        early = [unit for unit in hosted if unit.slot in first]
        late = [unit for unit in hosted if unit.slot not in first]
        self.stages = [stage for stage in (early, late) if stage]
        """Units deciding a batch together, in order (each stage's outputs go out first)."""
        self._routes = dispatch_table(hosted)
        self.screen = screen
        handles: frozenset[type[Event]] = frozenset().union(*(unit.handles for unit in hosted))
        self.filter_subjects = filter_subjects(handles | _gated(screen))
        units_stats = {unit.slot: UnitStats(unit.slot) for unit in hosted}
        self.stats = ConsumerStats(self.durable, units=units_stats)
        self._decode = decoder_for(*names)
        self._clock = clock
        self._wall = wall
        self._on_batch = on_batch
        self._runner: PipelinedRunner[EventT] | None = None
        self._stored_position = 0
        self._stopping = False

    def stop(self) -> None:
        """Finish the current batch (outputs stored, acknowledged), then return from ``run``."""
        self._stopping = True
        if self._runner is not None:
            self._runner.stop()

    async def run(
        self, *, on_replayed: Callable[[], Awaitable[None]] | None = None
    ) -> ConsumerStats:
        """Replay up to the durable's position (then await ``on_replayed``), then decide live
        until ``stop()``."""
        position = await self.position()
        await self.replay(position)
        if on_replayed is not None:
            await on_replayed()
        self._stored_position = position
        while not self._stopping:
            runner = self._runner = self.bus.pipelined_runner(
                self._spec(position + 1), self._decode, self._decide,
                on_stored=self._on_stored,
                before_publish=self.screen.prepare if self.screen is not None else None,
            )  # fmt: skip
            self.stats.is_live = True
            try:
                await runner.run()
                break
            except DurableLost:
                position = runner.acked_sequence
                self._lost(position, "while live")
            finally:
                self.stats.is_live = False
                self._stored_position = runner.acked_sequence
                self._runner = None
        return self.stats

    def _spec(self, start_sequence: int) -> ConsumerSpec:
        return ConsumerSpec(
            durable=self.durable,
            stream=EVENTS_STREAM,
            filter_subjects=self.filter_subjects,
            role=CONTROL_PLANE_ROLE,
            batch_size=self.config.batch_size,
            fetch_wait_s=self.config.fetch_wait_s,
            max_ack_pending=self.config.max_ack_pending,
            ack_wait_s=self.config.ack_wait_s,
            ack_all=True,
            start_sequence=start_sequence,
        )

    @property
    def stored_position(self) -> int:
        """The last stream sequence whose outputs are stored and acknowledged (what the
        control plane records apart from the durable, ``heddle.bus.positions``)."""
        runner = self._runner
        return runner.acked_sequence if runner is not None else self._stored_position

    async def position(self) -> int:
        """The last stream sequence whose outputs are stored (where the durable resumes)."""
        since = self.config.since_sequence
        return await start_position(self.bus, self.durable, since, self._lost)

    def _lost(self, position: int, when: str) -> None:
        note_lost(self.stats, position, when, self._wall())

    async def replay(self, position: int) -> None:
        """Fold every event of the units' kinds up to ``position`` into the state."""
        self.stats.position = position
        if position <= 0:
            return
        if position < self.config.since_sequence:
            return
        start = max(1, self.config.since_sequence)
        query = ReplayQuery(filter_subjects=self.filter_subjects, start_sequence=start)
        # ``batches`` is an async generator: close it when we stop early, so its ephemeral
        # consumer is deleted now rather than when the generator is collected.
        batches = cast(AsyncGenerator[list[ReplayRecord[EventT]]], self._replay_batches(query))
        try:
            async for batch in batches:
                for record in batch:
                    if record.stream_sequence > position or self._stopping:
                        return
                    self._fold(record)
                    self.stats.num_replayed += 1
        finally:
            await batches.aclose()

    def _replay_batches(self, query: ReplayQuery) -> AsyncIterator[list[ReplayRecord[EventT]]]:
        return self.bus.replay(query, self._decode).batches()

    def _fold(self, record: ReplayRecord[EventT]) -> None:
        """Replay: fold the event into every unit that handles it, outputs discarded (a unit
        that raises refused it when it was live)."""
        event = record.message
        if self.screen is not None and not self.screen.fold(event):
            return  # refused when live: no unit saw it
        for unit in self._routes.get(type(event), ()):
            try:
                unit.decide(event)
            except Exception as exc:
                if not isinstance(exc, UnknownPolicy):
                    log.error(
                        "%s: replay skips #%d in %s (refused when live): %r",
                        self.durable, record.stream_sequence, unit.slot, exc,
                    )  # fmt: skip

    def _on_stored(self, arrivals: Sequence[float]) -> None:
        # The inbox stamps arrivals with ``time.perf_counter`` (heddle.bus.pull), whatever
        # clock this consumer times its batches with.
        now, decisions = time.perf_counter(), self.stats.decisions
        for arrival in arrivals:
            if arrival > 0.0:
                decisions.add((now - arrival) * 1000.0)

    def _record_ages(self, fresh: list[Delivery[EventT]]) -> None:
        now_s, stats = self._wall(), self.stats
        for delivery in fresh:
            # The stream's timestamp, not the event's occurred_at: derived events (Predicted,
            # Prioritized) inherit their cause's occurred_at, which would count earlier hops.
            stored_at = delivery.stored_at or delivery.message.occurred_at
            age_ms = (now_s - stored_at) * 1000.0
            stats.age_ms.append(age_ms)
            stats.ages.add(age_ms)

    def _decide(self, batch: list[Delivery[EventT]]) -> Iterator[Stage]:
        """Decide a batch in stream order, stage by stage (the runner stores each stage's
        outputs before asking for the next, and acknowledges once all are stored)."""
        started = self._clock()
        stats = self.stats
        fresh = [delivery for delivery in batch if delivery.stream_sequence > stats.position]
        stats.num_redelivered += len(batch) - len(fresh)
        outputs: list[Output] = []
        elapsed_s = 0.0  # deciding only: not the pauses while a stage's outputs go out
        if fresh:
            stats.position = fresh[-1].stream_sequence
            stats.num_decided += len(fresh)
            self._record_ages(fresh)
            if self.screen is not None:
                fresh, gated = self.screen.screen(fresh)
                stats.num_rejected += len(gated.rejections)
                if gated.outputs or gated.rejections:
                    stats.num_outputs += len(gated.outputs)
                    yield gated
            for units in self.stages:
                stage = self._decide_stage(units, fresh)
                stats.num_outputs += len(stage.outputs)
                stats.num_rejected += len({r.delivery.stream_sequence for r in stage.rejections})
                outputs += [out for out in stage.outputs if isinstance(out, Event | WorkerCommand)]
                elapsed_s += self._clock() - started
                yield stage
                started = self._clock()
        stats.num_pending = batch[-1].num_pending
        elapsed_s += self._clock() - started
        stats.batch_ms.append(elapsed_s * 1000.0)
        if self._on_batch is not None:  # metrics (heddle.observability)
            self._on_batch([delivery.message for delivery in fresh], outputs, elapsed_s)

    def _decide_stage(self, units: list[Hosted], batch: Sequence[Delivery[EventT]]) -> Stage:
        """The stage's outputs and refusals: each unit decides the batch in turn (units share
        no state, so this order is as good as event by event, and it costs one clock read per
        unit and batch for the per-unit timings), with the arrivals of the events that had
        outputs."""
        outputs: list[Outgoing] = []
        rejections: list[Rejection] = []
        arrivals: dict[int, float] = {}
        """Stream sequence -> arrival of each event with outputs (once, whatever the units)."""
        for unit in units:
            unit_stats = self.stats.units[unit.slot]
            handles = unit.handles
            num_before = unit_stats.num_decided
            started = self._clock()
            for delivery in batch:
                event = delivery.message
                if type(event) not in handles:
                    continue
                unit_stats.num_decided += 1
                try:
                    produced = unit.decide(event)
                except Exception as exc:
                    rejections.append(Rejection(delivery, _reason(unit, delivery, exc)))
                    unit_stats.num_rejected += 1
                    continue
                if produced:
                    outputs += produced
                    unit_stats.num_outputs += len(produced)
                    arrivals[delivery.stream_sequence] = delivery.received_at
            if unit_stats.num_decided > num_before:
                unit_stats.decide_ms.append((self._clock() - started) * 1000.0)
        return Stage(outputs, rejections, list(arrivals.values()))


def _reason(unit: Hosted, delivery: Delivery[EventT], exc: Exception) -> str:
    """Why ``unit`` refused the event (a decider raising is logged with its traceback)."""
    if isinstance(exc, UnknownPolicy):
        return str(exc)
    log.error("%s refused #%d", unit.slot, delivery.stream_sequence, exc_info=exc)
    return f"decider failed: {type(exc).__name__}: {exc}"


def _gated(screen: Screen | None) -> frozenset[type[Event]]:
    """What the gate must see beyond the units' kinds (``heddle.controlplane.gating.GATED``)."""
    return GATED if screen is not None else frozenset()
