"""The workload hunter: its space (draws and mutations inside the ranges, cells reproducible
from parameters and seed, bounded steps), its search (parents alternately the worst by each
ratio, confirmation on more epochs) and its JSON document."""

from __future__ import annotations

import json
import math
import random
from dataclasses import fields, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.experiments.cells import HELDOUT_SEED_BASE, SEED_NAMESPACE, heldout_seed_base
from heddle.experiments.hunt import (
    Hunt,
    HuntConfig,
    HuntFinding,
    hunt_systems,
    run_hunt,
    worst_of_both,
)
from heddle.experiments.hunt_report import hunt_document, hunt_markdown
from heddle.experiments.hunt_space import (
    HUNT_GPU_COUNTS,
    HUNT_MODELS,
    HUNT_SEED_BASE,
    KV_RATIOS,
    MAX_HUNT_SEED,
    SEEDS_PER_HUNT,
    TRAJECTORIES_PER_GPU,
    HuntPoint,
    draw_point,
    gpus_for,
    hunt_seed,
    moved,
    mutate_point,
    within_steps,
)
from heddle.experiments.kv_pressure import KvPressure
from heddle.experiments.sweep import CellResult, SystemRun
from heddle.traces import TraceStep, TraceTrajectory
from heddle.workloads.history import HISTORY_KINDS
from heddle.workloads.zoo import zoo_family
from heddle.workloads.zoo_wide import WideParams

seeds = st.integers(min_value=0, max_value=2**45)


def _in_space(point: HuntPoint) -> bool:
    params_ok = all(
        WideParams.RANGES[item.name].contains(getattr(point.params, item.name))
        for item in fields(WideParams)
    )
    return (
        params_ok
        and point.model in HUNT_MODELS
        and point.num_gpus in HUNT_GPU_COUNTS
        and TRAJECTORIES_PER_GPU.contains(point.trajectories_per_gpu)
        and KV_RATIOS.contains(point.kv_ratio)
        and point.history in HISTORY_KINDS
    )


def _dimensions(point: HuntPoint) -> dict[str, object]:
    cluster = ("model", "num_gpus", "trajectories_per_gpu", "kv_ratio", "history")
    values = {item.name: getattr(point.params, item.name) for item in fields(WideParams)}
    return {**values, **{name: getattr(point, name) for name in cluster}}


@settings(max_examples=30)
@given(seed=seeds)
def test_a_drawn_point_is_in_the_space_and_its_seed_draws_it_again(seed: int) -> None:
    point = draw_point(random.Random(seed), seed)
    assert _in_space(point) and point.seed == seed
    assert draw_point(random.Random(seed), seed) == point


@settings(max_examples=60)
@given(seed=seeds, child_seed=seeds)
def test_a_mutation_moves_one_to_three_dimensions_inside_the_space(
    seed: int, child_seed: int
) -> None:
    parent = draw_point(random.Random(seed), seed)
    child = mutate_point(parent, random.Random(child_seed), child_seed + 1)
    assert _in_space(child)
    moved = [k for k, v in _dimensions(parent).items() if _dimensions(child)[k] != v]
    assert len(moved) <= 3  # a move can land on the same value (a clipped step)
    assert child.seed in (parent.seed, child_seed + 1)
    assert mutate_point(parent, random.Random(child_seed), child_seed + 1) == child


@settings(max_examples=50)
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=40), cap=st.integers(1, 200))
def test_within_steps_keeps_the_longest_prefix_under_the_cap(lengths: list[int], cap: int) -> None:
    trace = [
        TraceTrajectory(id=f"t{i}", prompt_tokens=1, steps=[TraceStep(output_tokens=1)] * n)
        for i, n in enumerate(lengths)
    ]
    kept = within_steps(trace, cap)
    fits = [k for k in range(1, len(trace) + 1) if sum(lengths[:k]) <= cap]
    assert kept == trace[: max(fits, default=1)]


@settings(max_examples=60)
@given(
    kept=st.integers(1, 5000),
    per_gpu=st.floats(1, 128),
    most=st.sampled_from(HUNT_GPU_COUNTS),
)
def test_a_cut_cell_keeps_its_density_on_fewer_gpus(kept: int, per_gpu: float, most: int) -> None:
    gpus = gpus_for(kept, per_gpu, most)
    assert gpus in HUNT_GPU_COUNTS and gpus <= most
    miss = abs(math.log(kept / gpus / per_gpu))
    assert all(
        miss <= abs(math.log(kept / c / per_gpu)) + 1e-12 for c in HUNT_GPU_COUNTS if c <= most
    )
    if kept == round(per_gpu * most):  # not cut: the GPUs asked
        assert gpus == most or abs(math.log(kept / most / per_gpu)) == pytest.approx(miss)


@settings(max_examples=10, deadline=None)
@given(seed=seeds, max_steps=st.integers(20, 3000))
def test_a_rollout_drawn_in_doubling_prefixes_is_the_whole_draw_cut(
    seed: int, max_steps: int
) -> None:
    point = replace(draw_point(random.Random(seed), seed), num_gpus=8)
    point = replace(point, trajectories_per_gpu=min(point.trajectories_per_gpu, 40.0))
    source = point.source(max_steps)
    whole = zoo_family("wide").generate(point.params, point.num_trajectories, seed, epoch=2)
    assert source.rollout(seed, 2) == within_steps(whole, max_steps)
    cell = point.cell(0, max_steps)
    kept = len(source.rollout(seed, 0))
    assert cell.num_gpus == gpus_for(kept, point.trajectories_per_gpu, point.num_gpus)


def test_a_cell_s_traces_are_its_parameters_and_seed_within_the_steps() -> None:
    seed = hunt_seed(0, 3)
    point = replace(draw_point(random.Random(seed), seed), history="other")
    cell = point.cell(3, max_steps=300)
    assert cell.source is not None
    trace, history = cell.source.traces(cell, 0)
    assert (trace, history) == cell.source.traces(point.cell(3, max_steps=300), 0)
    assert len(trace) <= point.num_trajectories
    assert sum(len(t.steps) for t in trace) <= 300 or len(trace) == 1
    assert len(history) == len(trace) and not {t.group for t in history} & {t.group for t in trace}
    same = replace(cell, history="same")
    assert [t.group for t in cell.source.traces(same, 0)[1]] == [t.group for t in trace]
    assert cell.source.traces(replace(cell, history="none"), 0)[1] == []
    assert cell.source.traces(cell, 1)[0] != trace  # another epoch


def test_hunt_systems_are_heddle_the_baselines_and_heddle_ablations() -> None:
    names = hunt_systems()
    assert "heddle" in names and {"verl", "slime", "autellix"} <= set(names)
    assert "heddle-no-admission" in names
    assert not {"rr", "fix-1", "fix-8"} & set(names)
    with pytest.raises(ValueError, match="needs heddle and at least one baseline"):
        HuntConfig(systems=("heddle", "heddle-no-sched"))


def test_hunt_seeds_never_meet_held_out_seeds_of_any_generation() -> None:
    assert HELDOUT_SEED_BASE == 2**40  # generation 1 keeps the fresh cells' seeds
    first, last = hunt_seed(0, 0), hunt_seed(MAX_HUNT_SEED, SEEDS_PER_HUNT - 1)
    assert first == HUNT_SEED_BASE and last < HUNT_SEED_BASE + SEED_NAMESPACE
    for generation in range(1, 65):
        base = heldout_seed_base(generation)  # a held-out draw seed is below base + namespace
        assert base + SEED_NAMESPACE <= first or base > last
    with pytest.raises(ValueError, match="in its namespace"):
        HuntConfig(seed=MAX_HUNT_SEED + 1)
    with pytest.raises(ValueError, match="generations start at 1"):
        heldout_seed_base(0)


def _finding(index: int, heddle: float, verl: float, ablation: float) -> HuntFinding:
    runs = {
        name: SystemRun(m, 1.0, 1.0, [1], 0, 0, 0, 0.0)
        for name, m in (("heddle", heddle), ("verl", verl), ("heddle-no-sched", ablation))
    }
    point = draw_point(random.Random(index), index)
    kv = KvPressure(1, 1, 1.0, 1.0, 1.0, 1.0)
    result = CellResult(point.cell(index, 10), "tuning", 8, 8, 1, kv, 1.0, runs)
    return HuntFinding(index, "random", None, point, result)


def test_parents_alternate_the_worst_by_each_ratio_without_repeats() -> None:
    findings = [
        _finding(0, 100, 100, 100),  # ties
        _finding(1, 130, 100, 140),  # worst to verl (1.30), second to the ablation (0.93)
        _finding(2, 100, 110, 80),  # worst to the ablation (1.25)
        _finding(3, 120, 100, 200),  # second to verl (1.20)
    ]
    assert findings[1].over_best_baseline == pytest.approx(1.3)
    assert findings[2].over_best_ablation == pytest.approx(1.25)
    assert findings[1].score == pytest.approx(1.3)
    assert [f.index for f in worst_of_both(findings, 3)] == [1, 2, 3]
    assert [f.index for f in worst_of_both(findings, 10)] == [1, 2, 3, 0]
    again = _finding(4, 129.9, 100.1, 140)  # cell 1 once more, within 0.5% of every makespan
    assert [f.index for f in worst_of_both([*findings, again], 10)] == [1, 2, 0, 3]
    apart = _finding(5, 129, 100, 140)  # 0.8% apart: another finding
    assert [f.index for f in worst_of_both([*findings, apart], 2)] == [1, 2]
    assert 5 in [f.index for f in worst_of_both([*findings, apart], 10)]


def test_the_headline_is_the_worst_cell_by_each_ratio_confirmed_figures_first() -> None:
    lucky = _finding(1, 130, 100, 140)  # 1.30 to verl on one epoch ...
    settled = replace(_finding(1, 110, 100, 140).result, lower_bounds_s=[1.0, 1.0, 1.0])
    findings = [
        replace(lucky, confirmed=settled),  # ... 1.10 on three: the confirmed figure counts
        _finding(2, 120, 100, 200),  # 1.20 to verl, unconfirmed
        _finding(3, 100, 110, 80),  # 1.25 to heddle-no-sched
    ]
    config = HuntConfig(budget=3, systems=("heddle", "verl", "heddle-no-sched"))
    document = hunt_document(Hunt(config, findings, 1.0, 1.0), jobs=1)
    assert document["worst"] == {
        "heddle_over_best_baseline": {"value": 1.2, "cell": 2, "against": "verl", "epochs": 1},
        "heddle_over_best_ablation": {
            "value": 1.25,
            "cell": 3,
            "against": "heddle-no-sched",
            "epochs": 1,
        },
    }
    markdown = hunt_markdown(Hunt(config, findings[:1], 1.0, 1.0))
    assert "Worst heddle / best baseline: **1.100** (cell 1, to verl, 3 epoch(s))" in markdown


@pytest.fixture(scope="module")
def tiny_hunt():  # type: ignore[no-untyped-def]
    config = HuntConfig(
        budget=3,
        round_size=2,
        num_parents=2,
        num_confirm=1,
        confirm_replications=2,
        max_steps=40,
        systems=("heddle", "verl", "heddle-no-sched"),
    )
    return run_hunt(config, jobs=1)


def test_a_tiny_hunt_searches_then_confirms_its_worst(tiny_hunt) -> None:  # type: ignore[no-untyped-def]
    findings = tiny_hunt.findings
    assert [f.index for f in findings] == [0, 1, 2]
    assert [f.phase for f in findings] == ["random", "random", "local"]
    searched = [replace(f, confirmed=None) for f in findings[:2]]  # the parents' view
    assert findings[2].parent == worst_of_both(searched, 2)[0].index
    for finding in findings[:2]:
        assert finding.point == draw_point(random.Random(finding.point.seed), finding.point.seed)
    for finding in findings:
        assert set(finding.result.runs) == {"heddle", "verl", "heddle-no-sched"}
        assert finding.result.num_steps <= 40 or finding.result.num_trajectories == 1
    confirmed = [f for f in findings if f.confirmed is not None]
    searched = [replace(f, confirmed=None) for f in findings]
    assert len(confirmed) == 1 and confirmed[0].index == worst_of_both(searched, 1)[0].index
    (run,) = {len(r.makespans_s) for r in confirmed[0].confirmed.runs.values()}  # type: ignore[union-attr]
    assert run == 2
    assert confirmed[0].confirmed.runs["heddle"].makespans_s[0] == pytest.approx(  # type: ignore[union-attr]
        confirmed[0].result.runs["heddle"].makespan_s
    )


def test_the_hunt_s_document_has_its_budget_wall_time_and_worst_cells(tiny_hunt) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(json.dumps(hunt_document(tiny_hunt, jobs=1), allow_nan=False))
    assert document["budget"] == 3 and document["wall_s"] > 0 and document["cpu_s"] > 0
    assert document["config"]["systems"] == ["heddle", "verl", "heddle-no-sched"]
    assert len(document["cells"]) == 3 and document["num_confirmed"] == 1
    spent = [c["cpu_s"] + (c["confirm_cpu_s"] or 0) for c in document["cells"]]
    assert sum(spent) == pytest.approx(document["cpu_s"], abs=0.1)  # what each cell cost
    (worst,) = document["worst_confirmed"]
    assert worst["confirmed"]["replications"] == 2
    assert set(worst["search"]["makespans_s"]) == {"heddle", "verl", "heddle-no-sched"}
    assert set(worst["search"]["heddle_over"]) == {"heddle-no-sched"}
    assert set(worst["params"]) == set(WideParams.RANGES)
    assert worst["num_steps"] <= 40 or worst["num_trajectories"] == 1
    ranked = [
        (c["confirmed"] or c["search"])["heddle_over_best_baseline"]
        for c in document["worst_vs_baseline"]
    ]
    assert ranked == sorted(ranked, reverse=True)
    assert hunt_markdown(tiny_hunt).startswith("# Hunt: budget 3")


@settings(max_examples=60)
@given(seed=seeds, name=st.sampled_from(sorted(WideParams.RANGES)))
def test_a_move_is_at_least_a_third_of_a_step_unless_it_meets_the_range_s_end(
    seed: int, name: str
) -> None:
    span = WideParams.RANGES[name]
    value = span.draw(random.Random(seed))
    new = moved(span, value, random.Random(seed + 1), 0.15)
    assert span.contains(new)
    if not span.is_integer and new not in (span.low, span.high):
        scale = math.log if span.is_log else float
        width = scale(span.high) - scale(span.low)
        assert abs(scale(new) - scale(value)) / width >= 0.05 - 1e-9
