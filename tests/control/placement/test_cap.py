"""A baseline's concurrency cap (``TrajectoryCap``): slime's semaphore and verl's bound on groups
in flight, against a reference semaphore; and, in the placement decider, a held sample routed at
the loads of the moment it starts."""

from __future__ import annotations

import random

import events_factory as b
import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.control.bundle import ControlOptions, cap_config
from heddle.control.placement import (
    AdmissionRequest,
    CapConfig,
    PlacementDecider,
    RouterPlacer,
    TrajectoryCap,
)
from heddle.control.systems import system_spec
from heddle.events import Event, StartTrajectory
from heddle.policy.cost.model import preset


def request(index: int, group: str = "") -> AdmissionRequest:
    return AdmissionRequest(
        key=("r", f"t{index}"),
        planned_worker_id=None,
        submitted_at=0.0,
        index=index,
        context_tokens=100,
        predicted_remaining_tokens=0.0,
        predicted_remaining_tool_s=0.0,
        group_id=group,
    )


def reference_semaphore(
    groups: list[str], per_group: bool, limit: int, finish_order: list[int]
) -> list[list[int]]:
    """What runs after each finish, by a plain FIFO semaphore over units (a trajectory, or a
    group that holds its slot until its last member ends)."""
    unit = [g if per_group else str(i) for i, g in enumerate(groups)]
    waiting = list(range(len(groups)))
    running: set[int] = set()
    started: list[list[int]] = []

    def fill() -> None:
        batch: list[int] = []
        while waiting:
            head = waiting[0]
            units = {unit[i] for i in running}
            if unit[head] not in units and len(units) >= limit:
                break
            running.add(waiting.pop(0))
            batch.append(head)
        started.append(batch)

    fill()
    for index in finish_order:
        if index in running:
            running.discard(index)
            fill()
    return started


@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=24),
    st.booleans(),
    st.integers(1, 6),
    st.randoms(use_true_random=False),
)
def test_the_cap_starts_what_a_fifo_semaphore_would(
    group_sizes: list[int], per_group: bool, limit: int, rng: random.Random
) -> None:
    groups = [f"g{g}" for g, size in enumerate(group_sizes) for _ in range(size + 1)]
    cap = TrajectoryCap(CapConfig(max_running=limit, per_group=per_group))
    for index, group in enumerate(groups):
        cap.plan(request(index, group))
    started = [[int(key[1][1:]) for key, _ in cap.admit([])]]
    running = set(started[0])
    finish_order: list[int] = []
    while running:
        index = rng.choice(sorted(running))
        running.discard(index)
        finish_order.append(index)
        cap.finished(("r", f"t{index}"))
        batch = [int(key[1][1:]) for key, _ in cap.admit([])]
        running.update(batch)
        started.append(batch)
        assert cap.num_running <= limit
    assert started == reference_semaphore(groups, per_group, limit, finish_order)
    assert sorted(finish_order) == list(range(len(groups)))  # everything ran


def test_a_per_worker_cap_grows_with_the_workers() -> None:
    cap = TrajectoryCap(CapConfig(per_worker=2))
    for index in range(10):
        cap.plan(request(index))
    cap.add_worker("w0", 0)
    cap.add_worker("w1", 0)
    assert len(cap.admit(["w0", "w1"])) == 4
    cap.add_worker("w2", 0)
    assert len(cap.admit(["w0", "w1", "w2"])) == 2


def test_the_bundles_caps_come_from_their_code() -> None:
    slime, verl = system_spec("slime"), system_spec("verl")
    assert cap_config(slime, "default") == CapConfig(per_worker=512)
    assert cap_config(verl, "default") is None  # the synchronous agent loop has none
    assert cap_config(verl, 3) == CapConfig(max_running=3, per_group=True)
    assert cap_config(slime, "off") is None
    assert cap_config(system_spec("heddle"), 3) is None  # no control: the setting is moot
    with pytest.raises(ValueError, match=">= 1"):
        cap_config(slime, 0)
    live = ControlOptions(cost_for_tp=lambda tp: preset("qwen3-8b", "h200", tp))
    assert live.concurrency_cap == "default"  # a live control plane runs the code's default


def test_a_held_sample_is_routed_at_the_loads_when_it_starts() -> None:
    """Cap 2 on three workers: t0 and t1 start at once on w0 and w1; t2 waits for a slot and,
    when t0 ends, goes to the least-loaded worker of that moment (w0, which t0 freed), not where
    the router would have sent it at time 0 (w2)."""
    rng = random.Random(0)
    decider = PlacementDecider(
        lambda: RouterPlacer("least_load", rng),
        admission=TrajectoryCap(CapConfig(max_running=2)),
    )
    events: list[Event] = [b.worker(w) for w in ("w0", "w1", "w2")]
    events += [b.rollout(3), *(b.submitted(f"t{i}", i) for i in range(3))]
    outputs = [o for event in events for o in decider.decide(event)]
    first = {o.traj_id: o.worker_id for o in outputs if isinstance(o, StartTrajectory)}
    assert first == {"t0": "w0", "t1": "w1"}
    decider.decide(b.generated("t1", 0, 5, worker_id="w1"))  # t1 runs on
    later = decider.decide(b.completed("t0", 1, 5))
    assert [(o.traj_id, o.worker_id) for o in later if isinstance(o, StartTrajectory)] == [
        ("t2", "w0")
    ]
