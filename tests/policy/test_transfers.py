"""The transfer scheduler: endpoint exclusivity, longest first, nothing lost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.migration.transfers import Transfer, TransferScheduler, schedule_transfers

ENDPOINTS = [f"w{i}" for i in range(5)]

transfers = st.builds(
    Transfer,
    traj_id=st.sampled_from([f"t{i}" for i in range(10)]),
    source_id=st.sampled_from(ENDPOINTS),
    target_id=st.sampled_from(ENDPOINTS),
    predicted_remaining_tokens=st.integers(0, 100).map(float),
).filter(lambda t: t.source_id != t.target_id)


def endpoints(batch: list[Transfer]) -> list[str]:
    return [e for t in batch for e in (t.source_id, t.target_id)]


@settings(max_examples=200)
@given(pending=st.lists(transfers, max_size=12), in_flight=st.lists(transfers, max_size=2))
def test_batches_are_endpoint_exclusive_longest_first_and_maximal(
    pending: list[Transfer], in_flight: list[Transfer]
) -> None:
    in_flight = [
        t
        for i, t in enumerate(in_flight)
        if not set(endpoints([t])) & set(endpoints(in_flight[:i]))
    ]
    batch = schedule_transfers(pending, in_flight)
    used = endpoints(batch) + endpoints(in_flight)
    assert len(used) == len(set(used))
    assert len({t.traj_id for t in batch}) == len(batch)
    lengths = [t.predicted_remaining_tokens for t in batch]
    assert lengths == sorted(lengths, reverse=True)
    moving = {t.traj_id for t in (*batch, *in_flight)}
    for t in pending:  # maximal: every skipped request conflicts with something chosen
        if t not in batch:
            assert t.traj_id in moving or {t.source_id, t.target_id} & set(used)


@settings(max_examples=100)
@given(ops=st.lists(st.one_of(transfers, st.sampled_from(["batch", "finish"])), max_size=40))
def test_scheduler_never_doubles_an_endpoint_and_loses_nothing(ops: list[Transfer | str]) -> None:
    scheduler = TransferScheduler()
    submitted: dict[str, Transfer] = {}
    done: set[str] = set()
    for op in ops:
        if isinstance(op, Transfer):
            if op.traj_id not in {t.traj_id for t in scheduler.in_flight}:
                scheduler.submit(op)
                submitted[op.traj_id] = op
        elif op == "batch":
            scheduler.next_batch()
        elif scheduler.in_flight:
            done.add(scheduler.finish(scheduler.in_flight[0].traj_id).traj_id)
        used = endpoints(scheduler.in_flight)
        assert len(used) == len(set(used))
        accounted = {t.traj_id for t in (*scheduler.pending, *scheduler.in_flight)} | done
        assert set(submitted) <= accounted


def test_longest_goes_first_on_a_shared_endpoint() -> None:
    pending = [Transfer("short", "a", "b", 10.0), Transfer("long", "a", "c", 900.0)]
    assert [t.traj_id for t in schedule_transfers(pending)] == ["long"]
    busy = [Transfer("x", "c", "d", 1.0)]
    assert [t.traj_id for t in schedule_transfers(pending, busy)] == ["short"]


def test_bad_transfers() -> None:
    with pytest.raises(ValueError, match="source and target"):
        schedule_transfers([Transfer("t", "a", "a")])
    with pytest.raises(ValueError, match="in flight"):
        TransferScheduler().finish("t")
