"""The re-shard estimate: the drain of a batch against a step-by-step reference, the cheap
filter never refusing a merge the estimate takes, the candidate merges, and the cases it is
built for (one straggler beside idle GPUs pays; full batches do not)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.policy.cost.model import CostModel, preset
from heddle.policy.resources.reshard import (
    MAX_DRAIN_PHASES,
    Member,
    Straggler,
    drain_s,
    estimate_reshard,
    may_pay,
    merge_groups,
)

COST = {tp: preset("qwen3-32b", "h200", tp) for tp in (1, 2, 4, 8)}
stragglers = st.lists(
    st.builds(
        Straggler,
        remaining_tokens=st.integers(0, 400).map(float),
        context_tokens=st.integers(1, 20_000),
        remaining_tool_s=st.floats(0.0, 5.0),
    ),
    max_size=MAX_DRAIN_PHASES,
)


def stepped_drain_s(cost: CostModel, group: list[Straggler]) -> float:
    """One decode step at a time: every unfinished trajectory gains a token per step."""
    remaining = [int(s.remaining_tokens) for s in group]
    contexts = [s.context_tokens for s in group]
    elapsed_s, done_at = 0.0, [0.0] * len(group)
    while any(remaining):
        live = [i for i, r in enumerate(remaining) if r > 0]
        elapsed_s += cost.decode_step_s(len(live), sum(contexts[i] for i in live))
        for i in live:
            remaining[i] -= 1
            contexts[i] += 1
            done_at[i] = elapsed_s
    return max(
        (done + s.remaining_tool_s for done, s in zip(done_at, group, strict=True)), default=0.0
    )


@given(stragglers, st.sampled_from(sorted(COST)))
def test_the_drain_matches_stepping_the_batch_one_token_at_a_time(
    group: list[Straggler], tp: int
) -> None:
    """Without tool calls every trajectory stays in the batch until it is done."""
    decoding = [Straggler(s.remaining_tokens, s.context_tokens) for s in group]
    assert math.isclose(
        drain_s(COST[tp], decoding), stepped_drain_s(COST[tp], decoding), rel_tol=1e-3
    )


def test_trajectories_in_long_tool_calls_barely_weigh_in_the_batch() -> None:
    """Eight others that spend nearly all their time in tools leave the decoding one at about
    its solo pace; decoding throughout, they would slow it down."""
    lone = Straggler(4000.0, 8000)
    tooling = [Straggler(400.0, 8000, 600.0) for _ in range(8)]
    decoding = [Straggler(4000.0, 8000) for _ in range(8)]
    alone_s = drain_s(COST[2], [lone])
    assert drain_s(COST[2], [lone, *tooling]) - 600.0 < 1.05 * alone_s
    assert drain_s(COST[2], [lone, *decoding]) > 1.05 * alone_s


@given(st.lists(stragglers, min_size=2, max_size=4), st.sampled_from([10.0, 30.0, 90.0]))
def test_the_filter_never_refuses_a_merge_that_pays(
    groups: list[list[Straggler]], restart_s: float
) -> None:
    members = [Member(f"w{i}", COST[1], tuple(g)) for i, g in enumerate(groups)]
    merged = COST[8]
    estimate = estimate_reshard(members, merged, restart_s=restart_s, weight_load_s=1.6)
    for margin in (0.0, 0.5, 1.0):
        if estimate.pays(margin, min_share=0.0):
            assert may_pay(members, merged, restart_s=restart_s, weight_load_s=1.6, margin=margin)


@given(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=8))
def test_merges_take_the_first_worker_and_add_up_to_a_degree(degrees: list[int]) -> None:
    workers = [(f"w{i}", tp) for i, tp in enumerate(degrees)]
    tp_of = dict(workers)
    for members, degree in merge_groups(workers, (1, 2, 4, 8)):
        assert members[0] == "w0" and len(members) >= 2
        assert sum(tp_of[m] for m in members) == degree > tp_of["w0"]
        assert members == sorted(members, key=lambda m: int(m[1:]))  # in the given order


def test_four_tp2_workers_merge_into_tp8_and_pairs_into_tp4() -> None:
    workers = [("a", 2), ("b", 2), ("c", 2), ("d", 2)]
    assert merge_groups(workers, (1, 2, 4, 8)) == [(["a", "b"], 4), (["a", "b", "c", "d"], 8)]
    assert merge_groups([("a", 8)], (1, 2, 4, 8)) == []


def lone_straggler(tokens: float) -> list[Member]:
    """One long trajectory on a TP1 worker beside seven idle ones."""
    alone = Member("w0", COST[1], (Straggler(tokens, 20_000),))
    return [alone, *(Member(f"w{i}", COST[1], ()) for i in range(1, 8))]


@pytest.mark.parametrize(("restart_s", "pays"), [(10.0, True), (30.0, True), (300.0, False)])
def test_a_lone_straggler_beside_idle_gpus_pays_unless_the_restart_is_long(
    restart_s: float, pays: bool
) -> None:
    estimate = estimate_reshard(
        lone_straggler(12_000), COST[8], restart_s=restart_s, weight_load_s=1.6
    )
    assert estimate.current_s == pytest.approx(12_000 * COST[1].decode_step_s(1, 26_000), 0.01)
    assert estimate.pays() is pays


def test_full_batches_do_not_pay_even_for_free() -> None:
    """Four TP2 workers of 20 sequences step about as fast as one TP8 worker of 80: merging
    saves nothing even with no switch cost."""
    members = [
        Member(f"w{i}", COST[2], tuple(Straggler(6000, 10_000) for _ in range(20)))
        for i in range(4)
    ]
    estimate = estimate_reshard(members, COST[8], restart_s=0.0, weight_load_s=0.0)
    assert estimate.saving_s < 0.05 * estimate.current_s
    assert not estimate.pays()
