"""The weights decider: one ``LoadWeights`` per live worker for each newer version, a late or
restarted worker brought up to the latest, stale versions and dead workers ignored; the state
replays to the same snapshot."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.control import WeightsDecider, rebuild_decider
from heddle.events import (
    DecodeError,
    Event,
    LoadWeights,
    WeightsLoaded,
    WeightSource,
    WeightsPublished,
    WorkerFailed,
    WorkerRegistered,
    decode_event,
    encode,
)


def registered(worker_id: str, incarnation: str = "a") -> WorkerRegistered:
    return WorkerRegistered(event_id=f"{worker_id}:{incarnation}", occurred_at=1.0,
                            worker_id=worker_id, engine="sim", incarnation=incarnation)  # fmt: skip


def published(version: int) -> WeightsPublished:
    source = WeightSource(path=f"/w/{version}")
    return WeightsPublished(event_id=f"weights:{version}", occurred_at=2.0,
                            weight_version=version, source=source)  # fmt: skip


def loads(outputs: list[object]) -> list[tuple[str, int]]:
    return [(o.worker_id, o.weight_version) for o in outputs if isinstance(o, LoadWeights)]


def test_each_live_worker_is_told_to_load_each_newer_version() -> None:
    decider = WeightsDecider()
    assert decider.decide(registered("w0")) == [] and decider.decide(registered("w1")) == []
    assert loads(decider.decide(published(1))) == [("w0", 1), ("w1", 1)]
    assert decider.decide(published(1)) == [] and decider.decide(published(0)) == []
    decider.decide(WorkerFailed(event_id="w1:f", occurred_at=3.0, worker_id="w1", reason="x"))
    assert loads(decider.decide(published(3))) == [("w0", 3)]
    assert loads(decider.decide(registered("w2"))) == [("w2", 3)]  # a late worker catches up
    assert loads(decider.decide(registered("w0", "b"))) == [("w0", 3)]  # so does a restart
    decider.decide(WeightsLoaded(event_id="l", occurred_at=4.0, weight_version=3,
                                 worker_id="w0", incarnation="a"))  # fmt: skip
    assert decider.loaded_versions() == {"w0": 0, "w2": 0}  # the old incarnation's report
    decider.decide(WeightsLoaded(event_id="m", occurred_at=4.0, weight_version=3,
                                 worker_id="w0", incarnation="b"))  # fmt: skip
    assert decider.loaded_versions() == {"w0": 3, "w2": 0}


def test_command_ids_name_the_version_and_the_incarnation() -> None:
    decider = WeightsDecider()
    decider.decide(registered("w0"))
    [first] = decider.decide(published(1))
    [again] = decider.decide(registered("w0"))  # the same incarnation registered twice
    [restart] = decider.decide(registered("w0", "b"))
    assert isinstance(first, LoadWeights) and isinstance(restart, LoadWeights)
    assert isinstance(again, LoadWeights) and again.command_id == first.command_id
    assert restart.command_id != first.command_id


events = st.lists(
    st.one_of(
        st.builds(registered, st.sampled_from(["w0", "w1", "w2"]), st.sampled_from("ab")),
        st.builds(published, st.integers(1, 6)),
    ),
    max_size=30,
)


@given(events)
def test_the_latest_version_is_the_highest_published_and_replay_agrees(
    history: list[Event],
) -> None:
    live = WeightsDecider()
    for event in history:
        live.decide(event)
    versions = [e.weight_version for e in history if isinstance(e, WeightsPublished)]
    assert live.snapshot()[0] == max(versions, default=0)
    rebuilt = WeightsDecider()
    rebuild_decider(rebuilt, history)
    assert rebuilt.snapshot() == live.snapshot()


def test_a_negative_version_is_refused_by_the_decoder() -> None:
    data = encode(published(1)).replace(b'"weight_version":1', b'"weight_version":-1')
    with pytest.raises(DecodeError, match="weight_version"):
        decode_event(data)
