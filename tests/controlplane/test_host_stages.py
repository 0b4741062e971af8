"""The host hands each event to its units: every unit gets exactly the events of the types it
handles, in stream order; the ``first`` units decide in a stage of their own, before the others;
a refusal by one unit does not keep the others from deciding; a replay folds each event into
the same units (property-tested against a brute-force per-unit filter). The consumer is driven
without a bus: deciding a batch does no I/O (``tests/controlplane/test_host.py`` runs it live)."""

from __future__ import annotations

from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.bus import Bus, Delivery, ReplayRecord, Stage
from heddle.control import Output
from heddle.controlplane.host import DeciderConsumer, Hosted
from heddle.events import (
    Completed,
    Event,
    RolloutFinished,
    RolloutSubmitted,
    ToolCalled,
    WorkerHeartbeat,
)

KINDS: tuple[type[Event], ...] = (RolloutSubmitted, ToolCalled, Completed, WorkerHeartbeat)


def make_event(kind: type[Event], index: int) -> Event:
    event_id, at = f"e{index}", float(index)
    if kind is RolloutSubmitted:
        return RolloutSubmitted(
            event_id=event_id, occurred_at=at, rollout_id="r", policy="verl", num_trajectories=1
        )
    if kind is ToolCalled:
        return ToolCalled(
            event_id=event_id, occurred_at=at, rollout_id="r", traj_id="t", step=index,
            worker_id="w", call_id="c", tool="trace",
        )  # fmt: skip
    if kind is Completed:
        return Completed(
            event_id=event_id, occurred_at=at, rollout_id="r", traj_id=f"t{index}", num_steps=1
        )
    return WorkerHeartbeat(event_id=event_id, occurred_at=at, worker_id="w", sequence=index)


class Recorder:
    """A unit that records what it decides and answers each event with one output."""

    def __init__(self, slot: str, handles: set[type[Event]], refuse: float = -1.0) -> None:
        self.slot = slot
        self.handles = frozenset(handles)
        self.seen: list[str] = []
        self._refuse = refuse

    def decide(self, event: Event) -> list[Output]:
        if event.occurred_at == self._refuse:
            raise RuntimeError(f"{self.slot} refuses {event.event_id}")
        self.seen.append(event.event_id)
        output = RolloutFinished(
            event_id=f"{self.slot}:{event.event_id}", rollout_id="r", occurred_at=0.0,
            num_completed=0,
        )  # fmt: skip
        return [output]


def deliveries(events: list[Event]) -> list[Delivery[Event]]:
    return [
        Delivery(event, "s", index + 1, 1, 0, b"", "ack", received_at=index + 1.0)
        for index, event in enumerate(events)
    ]


def hosting(units: list[Recorder], first: set[str]) -> DeciderConsumer:
    """A consumer of ``units`` that is never run (no bus needed to decide a batch)."""
    hosted: list[Hosted] = list(units)
    return DeciderConsumer(cast(Bus, None), hosted, first=first)


def decide(consumer: DeciderConsumer, events: list[Event]) -> list[Stage]:
    return list(consumer._decide(deliveries(events)))


def fold(consumer: DeciderConsumer, events: list[Event]) -> None:
    for index, event in enumerate(events):
        consumer._fold(ReplayRecord(index + 1, "s", event))


def ident(output: Output) -> str:
    return output.event_id if isinstance(output, Event) else output.command_id


unit_handles = st.sets(st.sampled_from(KINDS), max_size=len(KINDS))


@settings(max_examples=60)
@given(
    kinds=st.lists(st.sampled_from(KINDS), max_size=40),
    handles=st.lists(unit_handles, min_size=1, max_size=4),
    num_first=st.integers(min_value=0, max_value=4),
)
def test_each_unit_sees_exactly_its_events_in_order(
    kinds: list[type[Event]], handles: list[set[type[Event]]], num_first: int
) -> None:
    events = [make_event(kind, index) for index, kind in enumerate(kinds)]
    units = [Recorder(f"u{index}", kinds_of) for index, kinds_of in enumerate(handles)]
    first = {unit.slot for unit in units[:num_first]}
    stages = decide(hosting(units, first), events) if events else []
    for unit in units:  # brute force: the unit's own filter over the stream
        assert unit.seen == [e.event_id for e in events if type(e) in unit.handles]
    early = [u for u in units if u.slot in first]
    late = [u for u in units if u.slot not in first]
    expected_stages = [[f"{u.slot}:{i}" for u in group for i in u.seen] for group in (early, late)]
    assert [[ident(o) for o in stage.outputs] for stage in stages] == [
        ids for ids, group in zip(expected_stages, (early, late), strict=True) if group and events
    ]
    # Each stage names the arrivals of the events it had outputs for, once each.
    groups = [group for group in (early, late) if group] if events else []
    for stage, group in zip(stages, groups, strict=True):
        answered = {
            i + 1.0 for i, e in enumerate(events) if any(type(e) in u.handles for u in group)
        }
        assert sorted(stage.arrivals) == sorted(answered)
    replayed = [Recorder(unit.slot, set(unit.handles)) for unit in units]
    fold(hosting(replayed, first), events)
    assert [unit.seen for unit in replayed] == [unit.seen for unit in units]


def test_the_router_decides_first_and_a_refusal_stops_no_one() -> None:
    events = [make_event(kind, index) for index, kind in enumerate(KINDS)]
    router = Recorder("placement", {ToolCalled, Completed}, refuse=1.0)
    others = Recorder("prediction", {ToolCalled, Completed})
    consumer = hosting([others, router], first={"placement"})
    stages = consumer._decide(deliveries(events))
    outputs, rejections, arrivals = next(stages)
    assert others.seen == []  # not decided until the router's outputs are out
    assert list(arrivals) == [3.0]  # e1 was refused: no outputs, no decision latency
    assert [ident(o) for o in outputs] == ["placement:e2"]
    assert [r.delivery.stream_sequence for r in rejections] == [2]
    assert "placement refuses e1" in rejections[0].reason
    outputs, rejections, arrivals = next(stages)
    assert others.seen == ["e1", "e2"] and rejections == [] and list(arrivals) == [2.0, 3.0]
    stats = consumer.stats.units
    assert stats["placement"].num_rejected == 1 and stats["placement"].num_decided == 2
    assert stats["prediction"].num_outputs == 2 and len(stats["prediction"].decide_ms) == 1
