"""The worker-mix certificate: from any feasible split it descends to the exact optimum."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.placement.blocks import cost_table
from heddle.policy.placement.bottleneck import solve_fixed_order
from heddle.policy.placement.worker_mix import TypedSplit, feasible_split, minimise_over_orders

from .strategies import StepInterference, brute_force_heterogeneous, interferences

TYPES = st.lists(
    st.tuples(st.sampled_from([0.3, 0.5, 1.0, 1.7]), interferences(max_cap=5)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=120)
@given(
    lengths=st.lists(st.integers(0, 20).map(float), min_size=1, max_size=6),
    types=TYPES,
    data=st.data(),
)
def test_descends_from_any_worker_order_to_the_optimum(
    lengths: list[float], types: list[tuple[float, StepInterference]], data: st.DataObject
) -> None:
    lengths.sort(reverse=True)
    counts = [data.draw(st.integers(1, 2)) for _ in types]
    tables = [cost_table(f, len(lengths), t) for t, f in types]
    # An arbitrary (often poor) interleaving of the workers as the incumbent.
    kinds = [kind for kind, count in enumerate(counts) for _ in range(count)]
    kinds = data.draw(st.permutations(kinds))
    start = solve_fixed_order(lengths, [tables[k] for k in kinds])
    incumbent = TypedSplit(list(kinds), start.sizes, start.makespan)
    best = minimise_over_orders(lengths, tables, counts, incumbent)
    workers = [types[k] for k in kinds]
    assert best.makespan == brute_force_heterogeneous(lengths, workers)
    assert sum(best.sizes) == len(lengths) or best.makespan == float("inf")


def test_feasible_split_respects_counts() -> None:
    lengths = [9.0, 8.0, 7.0, 1.0, 1.0, 1.0]
    flat = StepInterference(1.0, (0.0,), cap=2)
    tables = [cost_table(flat, len(lengths), 1.0), cost_table(flat, len(lengths), 2.0)]
    found = feasible_split(lengths, tables, [2, 1], budget=9.0)
    assert found is not None
    assert found.types.count(0) <= 2 and found.types.count(1) <= 1
    assert sum(found.sizes) == len(lengths)
    assert found.makespan == 9.0
    assert feasible_split(lengths, tables, [2, 1], budget=8.99) is None
