"""Command delays: a lognormal through the configured median and p99, drawn per command id
(the same id, the same delay, whatever else was sent), in order per worker."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.sim import SimConfig
from heddle.sim.command_delays import CommandDelays


def test_the_draws_follow_the_median_and_the_p99() -> None:
    delays = CommandDelays(3.0, 60.0, seed=0)
    # One worker per command: no ordering constraint between them.
    draws = sorted(delays.arrival_s(f"c{i}", f"w{i}", 0.0) for i in range(20_000))
    assert statistics.median(draws) == pytest.approx(0.003, rel=0.05)
    assert draws[int(0.99 * len(draws))] == pytest.approx(0.060, rel=0.1)
    assert min(draws) > 0.0


def test_a_command_s_delay_depends_on_its_id_and_the_seed_only() -> None:
    first, second = CommandDelays(3.0, 60.0, seed=1), CommandDelays(3.0, 60.0, seed=1)
    second.arrival_s("other", "w9", 0.0)
    assert first.arrival_s("c", "w0", 5.0) == second.arrival_s("c", "w0", 5.0)
    assert CommandDelays(3.0, 60.0, seed=2).arrival_s("c", "w0", 5.0) != first.arrival_s(
        "c", "w1", 5.0
    )


@given(sends=st.lists(st.tuples(st.sampled_from(["w0", "w1"]), st.floats(0, 0.01)), max_size=40))
def test_commands_to_one_worker_arrive_in_the_order_sent(sends: list[tuple[str, float]]) -> None:
    delays = CommandDelays(3.0, 60.0, seed=0)
    now, last = 0.0, {"w0": 0.0, "w1": 0.0}
    for index, (worker, gap_s) in enumerate(sends):
        now += gap_s
        arrival = delays.arrival_s(f"c{index}", worker, now)
        assert arrival >= now and arrival >= last[worker]
        last[worker] = arrival


def test_zero_latency_is_instant_and_bad_settings_are_refused() -> None:
    assert CommandDelays(0.0, 0.0, seed=0).is_instant
    constant = CommandDelays(5.0, 5.0, seed=0)
    assert not constant.is_instant
    assert constant.arrival_s("c", "w0", 1.0) == pytest.approx(1.005)
    with pytest.raises(ValueError, match="p50 <= p99"):
        CommandDelays(10.0, 5.0, seed=0)
    with pytest.raises(ValueError, match="control_latency"):
        SimConfig(control_latency_p50_ms=-1.0)
