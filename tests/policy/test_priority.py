"""Priority policies and the preemption decision."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.scheduling.preemption import (
    PreemptionConfig,
    RankedRequest,
    decide_preemptions,
)
from heddle.policy.scheduling.priority import (
    PRIORITY_POLICIES,
    MultiLevelLeastAttained,
    TrajectoryFacts,
    priority_policy,
)


def facts(**kwargs: float) -> TrajectoryFacts:
    return TrajectoryFacts(**kwargs)


def test_pps_runs_the_longest_predicted_first() -> None:
    pps = priority_policy("pps")
    assert pps.priority(facts(predicted_remaining_tokens=9000)) > pps.priority(
        facts(predicted_remaining_tokens=100)
    )
    assert pps.is_preemptive


def test_round_robin_sends_a_returning_trajectory_to_the_back_but_fcfs_does_not() -> None:
    old = facts(arrival_s=0.0, step_arrival_s=50.0)
    new = facts(arrival_s=10.0, step_arrival_s=11.0)
    rr, fcfs = priority_policy("round_robin"), priority_policy("fcfs")
    assert rr.priority(new) > rr.priority(old)
    assert fcfs.priority(old) > fcfs.priority(new)


def test_plas_prefers_least_attained_service() -> None:
    plas = priority_policy("plas")
    assert plas.priority(facts(attained_service_s=1.0)) > plas.priority(
        facts(attained_service_s=30.0)
    )
    spf = priority_policy("spf")
    assert spf.priority(facts(predicted_remaining_tokens=5)) > spf.priority(
        facts(predicted_remaining_tokens=50)
    )


def _brute_force_level(service: float, num_levels: int, first: float, growth: float) -> int:
    bounds = [first * growth**k for k in range(num_levels - 1)]
    return sum(1 for bound in bounds if service >= bound)


@settings(max_examples=200)
@given(
    service=st.floats(0, 1e4, allow_nan=False),
    num_levels=st.integers(1, 10),
    first=st.floats(0.1, 10),
    growth=st.floats(1.1, 4),
)
def test_plas_levels_are_the_service_ranges(
    service: float, num_levels: int, first: float, growth: float
) -> None:
    plas = MultiLevelLeastAttained(num_levels=num_levels, first_level_s=first, growth=growth)
    level = plas.level(facts(attained_service_s=service))
    assert level == _brute_force_level(service, num_levels, first, growth)
    assert plas.priority(facts(attained_service_s=service)) == -level


def test_plas_is_first_come_first_served_within_a_level() -> None:
    plas = priority_policy("plas")
    # 2.5 s and 3.9 s both lie in [2, 4): equal priorities, so the queue's arrival order rules.
    assert plas.priority(facts(attained_service_s=2.5)) == plas.priority(
        facts(attained_service_s=3.9)
    )
    assert plas.priority(facts(attained_service_s=0.5)) > plas.priority(
        facts(attained_service_s=1.5)
    )
    assert plas.priority(facts(attained_service_s=1e6)) == -7.0  # the open last level


def test_plas_promotes_a_starving_program_to_the_top_queue() -> None:
    plas = priority_policy("plas")
    assert plas.priority(facts(attained_service_s=10.0, waited_s=19.0)) == -4.0
    assert plas.priority(facts(attained_service_s=10.0, waited_s=20.0)) == 0.0
    # Served since: the ratio falls below 2 and it drops back to its service's queue.
    assert plas.priority(facts(attained_service_s=40.0, waited_s=20.0)) == -6.0


def test_plas_counts_tokens_at_the_per_token_time() -> None:
    plas = MultiLevelLeastAttained(service="tokens")
    # 100 tokens at 25 ms = 2.5 s: the [2, 4) queue.
    assert plas.level(facts(attained_service_tokens=100, seconds_per_token=0.025)) == 2


def test_registry_names_match_and_unknown_name_is_clear() -> None:
    for name in PRIORITY_POLICIES:
        assert priority_policy(name).name == name
    with pytest.raises(ValueError, match="choose one of"):
        priority_policy("lifo")


def requests(prefix: str, max_size: int) -> st.SearchStrategy[list[RankedRequest]]:
    one = st.tuples(
        st.integers(0, 20).map(float), st.integers(1, 4).map(float), st.integers(0, 9).map(float)
    )
    return st.lists(one, max_size=max_size).map(
        lambda rows: [RankedRequest(f"{prefix}{i}", p, s, a) for i, (p, s, a) in enumerate(rows)]
    )


@settings(max_examples=300)
@given(
    running=requests("run", 6),
    waiting=requests("wait", 6),
    free=st.integers(0, 6).map(float),
    gap=st.sampled_from([0.0, 1.0, 3.0]),
    preemptive=st.booleans(),
)
def test_preemption_decision_invariants(
    running: list[RankedRequest],
    waiting: list[RankedRequest],
    free: float,
    gap: float,
    preemptive: bool,
) -> None:
    config = PreemptionConfig(min_priority_gap=gap, min_relative_gap=0.0)
    decision = decide_preemptions(running, waiting, free, config, allow_preemption=preemptive)
    by_id = {r.request_id: r for r in (*running, *waiting)}
    victims = [p.victim_id for p in decision.preemptions]
    # Capacity is never exceeded.
    used = sum(by_id[a].size for a in decision.admitted) - sum(by_id[v].size for v in victims)
    assert used <= free
    # Victims are distinct running requests, each beaten by a margin by an admitted request.
    assert len(set(victims)) == len(victims)
    for p in decision.preemptions:
        assert p.victim_id.startswith("run") and p.replacement_id in decision.admitted
        assert by_id[p.replacement_id].priority > by_id[p.victim_id].priority + gap
    if not preemptive:
        assert not victims
    # Admitted requests are a prefix of the waiting order (no overtaking).
    order = sorted(waiting, key=lambda r: (-r.priority, r.arrival_s, r.request_id))
    assert decision.admitted == [r.request_id for r in order[: len(decision.admitted)]]
    # Nothing that fits is left waiting.
    if len(decision.admitted) < len(order):
        assert order[len(decision.admitted)].size > free - used


def test_wobbling_prediction_does_not_thrash() -> None:
    config = PreemptionConfig(min_relative_gap=0.05)
    running = [RankedRequest("a", 1000.0)]
    waiting = [RankedRequest("b", 1030.0)]
    assert decide_preemptions(running, waiting, 0.0, config).preemptions == []
    waiting = [RankedRequest("b", 2000.0)]
    decision = decide_preemptions(running, waiting, 0.0, config)
    assert [(p.victim_id, p.replacement_id) for p in decision.preemptions] == [("a", "b")]


def test_lowest_priority_yields_first() -> None:
    running = [RankedRequest("hi", 50.0), RankedRequest("lo", 5.0), RankedRequest("mid", 20.0)]
    waiting = [RankedRequest("new", 100.0, size=2.0)]
    decision = decide_preemptions(running, waiting, 0.0)
    assert [p.victim_id for p in decision.preemptions] == ["lo", "mid"]


def test_preemption_bad_input() -> None:
    with pytest.raises(ValueError, match="free_capacity"):
        decide_preemptions([], [], -1.0)
    with pytest.raises(ValueError, match="both running and waiting"):
        decide_preemptions([RankedRequest("x", 1.0)], [RankedRequest("x", 2.0)], 1.0)


_SPAN = st.floats(0, 1e4)


@settings(max_examples=300)
@given(
    remaining=st.tuples(st.floats(0, 1e5), st.floats(0, 1e5)),
    service=st.tuples(_SPAN, _SPAN),
    tool=st.tuples(_SPAN, _SPAN),
    extra_wait=st.tuples(_SPAN, _SPAN),
    seconds_per_token=st.floats(1e-3, 0.1),
)
def test_pps_orders_waiting_requests_by_remaining_time_plus_all_time_waited(
    remaining: tuple[float, float],
    service: tuple[float, float],
    tool: tuple[float, float],
    extra_wait: tuple[float, float],
    seconds_per_token: float,
) -> None:
    """Two trajectories of one rollout (submitted together), both waiting now: PPS runs first
    the one whose predicted remaining time plus every second it has waited so far (in the
    control plane, in engine queues, the current wait included) is larger. Checked against that
    sum computed from a clock; the policy reads none, so a request's priority never has to
    change while it waits."""
    pps = priority_policy("pps")
    # Whatever a trajectory did not spend generating or in tools, it spent waiting.
    now = max(s + t + w for s, t, w in zip(service, tool, extra_wait, strict=True))
    aged = [
        r * seconds_per_token + (now - s - t)
        for r, s, t in zip(remaining, service, tool, strict=True)
    ]
    a, b = (
        pps.priority(
            facts(
                predicted_remaining_tokens=r,
                seconds_per_token=seconds_per_token,
                attained_service_s=s,
                attained_tool_s=t,
            )
        )
        for r, s, t in zip(remaining, service, tool, strict=True)
    )
    if aged[0] > aged[1] + 1e-6:
        assert a > b
    elif aged[1] > aged[0] + 1e-6:
        assert b > a
