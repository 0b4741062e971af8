"""The decider protocol: the control plane as pure ``(state, event) -> outputs`` functions.

A decider consumes events of the contract (``heddle.events``) and returns the events and worker
commands they call for. The live consumers (durable JetStream consumers) and the simulator call
exactly the same ``decide``; neither the decider nor its state does I/O, reads a clock (``now``
is ``event.occurred_at``) or draws global randomness (a decider that needs randomness gets a
seeded ``random.Random``).

Rules every decider follows:

- **Ownership.** A decider's state is mutable, for speed, and owned by the decider instance: one
  consumer (or one simulator) drives it from one thread, in event order.
- **Deterministic ids.** Every output's ``event_id`` / ``command_id`` is derived from the input
  (``heddle.ids.derive_id``), so a consumer that re-processes an event after a crash re-publishes
  duplicates that JetStream drops.
- **Replay.** The state is a function of the events consumed, in order; ``replay`` re-applies a
  recorded history and discards the outputs (which were published the first time), rebuilding
  the identical state. A decider's own events, when they come back from the stream, are no-ops.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from heddle.events import Event, WorkerCommand

Output = Event | WorkerCommand
"""What a decider emits: events (facts it established) and commands (to rollout workers)."""


class Decider(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def handles(self) -> frozenset[type[Event]]:
        """The event types ``decide`` reacts to; others may be skipped by the caller."""
        ...

    def decide(self, event: Event) -> list[Output]:
        """Fold one event into the state; the events and commands it calls for, in order."""
        ...


def rebuild_decider(decider: Decider, events: Iterable[Event]) -> int:
    """Rebuild a decider's state from a recorded history (outputs discarded); returns how many
    of the events it handles were applied."""
    handled = decider.handles
    applied = 0
    for event in events:
        if type(event) in handled:
            decider.decide(event)
            applied += 1
    return applied


class Handler(Protocol):
    @property
    def handles(self) -> frozenset[type[Event]]: ...


H = TypeVar("H", bound=Handler)


def dispatch_table(deciders: Sequence[H]) -> dict[type[Event], list[H]]:
    """Event type -> the deciders (or anything with ``handles``) that handle it, in the given
    order (callers route by it)."""
    table: dict[type[Event], list[H]] = {}
    for decider in deciders:
        for event_type in decider.handles:
            table.setdefault(event_type, []).append(decider)
    return table
