"""Fan-out of one consumer's events to the decider units it hosts, in stream order.

The control plane decodes each event once and hands it to every unit that handles its type
(``Hosted.handles``): the five decider slots and worker liveness. Units are independent (each
owns its state), so a batch is decided unit by unit, each unit seeing the batch's events in
stream order. The units named ``first`` (the router: ``placement``) decide the whole batch in a
stage of their own, whose outputs the runner sends before the other units decide: a step's
``ContinueTrajectory`` never waits for predictions of the same batch.

Within a stage each unit decides the batch in turn (one unit's outputs, then the next's): units
share no state, so this order is as good as event by event, and it costs one clock read per
unit and batch for the per-unit timings. A unit that refuses an event (raises) does not stop
the others from deciding it; the event is dead-lettered once (``heddle.bus.PipelinedRunner``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from heddle.bus import Delivery, Outgoing, Rejection, Stage
from heddle.consumers.slots import UnknownPolicy
from heddle.control import Output
from heddle.control.decider import dispatch_table
from heddle.events import Event

log = logging.getLogger(__name__)
E = TypeVar("E", bound=Event)

_LATENCY_WINDOW = 4096


class Hosted(Protocol):
    """What a consumer hosts: a slot's deciders (``SlotDeciders``) or the liveness fold."""

    @property
    def slot(self) -> str: ...

    @property
    def handles(self) -> frozenset[type[Event]]: ...

    def decide(self, event: Event) -> list[Output]: ...


@dataclass(slots=True)
class UnitStats:
    """One hosted unit's share of the work (``heddle status``, ``heddle bench control``)."""

    slot: str
    num_decided: int = 0
    num_outputs: int = 0
    num_rejected: int = 0
    decide_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    """Recent batches: time this unit spent deciding them (milliseconds)."""


class FanOut:
    """Routes events to the units that handle them; decides batches in stages."""

    def __init__(
        self,
        units: Sequence[Hosted],
        *,
        first: Collection[str] = (),
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        names = [unit.slot for unit in units]
        if len(set(names)) != len(names):
            raise ValueError(f"units must have distinct slots, got {names}")
        self.units = list(units)
        self.stats = {unit.slot: UnitStats(unit.slot) for unit in units}
        early = [unit for unit in units if unit.slot in first]
        late = [unit for unit in units if unit.slot not in first]
        self.stages = [stage for stage in (early, late) if stage]
        self.handles: frozenset[type[Event]] = frozenset().union(*(u.handles for u in units))
        self._routes = dispatch_table(units)
        self._clock = clock

    def fold(self, event: Event) -> list[tuple[Hosted, Exception]]:
        """Replay: fold ``event`` into every unit that handles it, outputs discarded; the
        units that raised (they refused the event when it was live)."""
        failures: list[tuple[Hosted, Exception]] = []
        for unit in self._routes.get(type(event), ()):
            try:
                unit.decide(event)
            except Exception as exc:
                failures.append((unit, exc))
        return failures

    def decide(self, batch: Sequence[Delivery[E]]) -> Iterator[Stage]:
        """The batch's outputs and refusals, one stage at a time (a generator: a stage is
        decided when the caller asks for it), with the arrivals of the events that had
        outputs."""
        for stage in self.stages:
            yield self._decide_stage(stage, batch)

    def _decide_stage(self, units: list[Hosted], batch: Sequence[Delivery[E]]) -> Stage:
        outputs: list[Outgoing] = []
        rejections: list[Rejection] = []
        arrivals: dict[int, float] = {}
        """Stream sequence -> arrival of each event with outputs (once, whatever the units)."""
        clock = self._clock
        for unit in units:
            stats = self.stats[unit.slot]
            handles = unit.handles
            num_before = stats.num_decided
            started = clock()
            for delivery in batch:
                event = delivery.message
                if type(event) not in handles:
                    continue
                stats.num_decided += 1
                try:
                    produced = unit.decide(event)
                except Exception as exc:
                    rejections.append(Rejection(delivery, _reason(exc)))
                    stats.num_rejected += 1
                    if not isinstance(exc, UnknownPolicy):
                        log.exception("%s refused #%d", unit.slot, delivery.stream_sequence)
                    continue
                if produced:
                    outputs += produced
                    stats.num_outputs += len(produced)
                    arrivals[delivery.stream_sequence] = delivery.received_at
            if stats.num_decided > num_before:
                stats.decide_ms.append((clock() - started) * 1000.0)
        return Stage(outputs, rejections, list(arrivals.values()))


def _reason(exc: Exception) -> str:
    if isinstance(exc, UnknownPolicy):
        return str(exc)
    return f"decider failed: {type(exc).__name__}: {exc}"
