"""The zoo sweep: cells, the fresh held-out split and the histories, KV pressure, a tiny sweep's
summary checked by hand, and the ratio arithmetic on hand-made results."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.experiments.cells import HELDOUT_SEED_BASE, Cell
from heddle.experiments.kv_pressure import (
    FIT_MARGIN,
    KvPressure,
    cluster_kv_tokens,
    kv_pressure,
    scaled_config,
)
from heddle.experiments.sweep import (
    CellResult,
    SweepConfig,
    SystemRun,
    cell_traces,
    mean_run,
    run_sweep,
    sweep_cells,
)
from heddle.experiments.sweep_report import markdown_report
from heddle.experiments.sweep_summary import (
    cell_ratios,
    ratio_stats,
    summarise_sweep,
    sweep_document,
)
from heddle.sim import SimConfig, simulate
from heddle.workloads import generate
from heddle.workloads.zoo import ZOO

TINY = SweepConfig(
    families=("math",),
    models=("qwen3-8b",),
    gpu_counts=(4,),
    kv_ratios=(0.5, 2.0),
    num_cells=2,
    systems=("heddle", "verl", "slime", "heddle-no-sched"),
    steps_per_cell=40,
    min_trajectories=8,
    max_trajectories=24,
    num_heldout_cells=0,
    with_corpus=False,
)


@settings(max_examples=20)
@given(
    seed=st.integers(min_value=0, max_value=10_000),
    num_cells=st.integers(0, 60),
    num_heldout=st.integers(0, 30),
)
def test_tuning_cells_are_the_old_grid_and_heldout_ones_a_fresh_namespace(
    seed: int, num_cells: int, num_heldout: int
) -> None:
    config = SweepConfig(
        seed=seed, num_cells=num_cells, num_heldout_cells=num_heldout, with_corpus=False
    )
    tuning = sweep_cells(replace(config, split="tuning"))
    heldout = sweep_cells(replace(config, split="heldout"))
    assert len(tuning) == num_cells and len(heldout) == num_heldout
    assert all(c.split == "tuning" for c in tuning) and all(c.split == "heldout" for c in heldout)
    # Tuning cell k keeps the draw every earlier sweep ran (the old held-out quarter included).
    assert [c.draw_seed for c in tuning] == [seed * 100_000 + k for k in range(num_cells)]
    assert all(c.draw_seed < HELDOUT_SEED_BASE for c in tuning)
    assert [c.draw_seed for c in heldout] == [
        HELDOUT_SEED_BASE + seed * 100_000 + k for k in range(num_heldout)
    ]
    every = sweep_cells(config)
    assert [c.index for c in every] == list(range(num_cells + num_heldout))
    assert [c.draw_seed for c in every] == [c.draw_seed for c in tuning + heldout]


def test_each_history_judges_every_zoo_cell_under_the_same_index() -> None:
    config = SweepConfig(num_cells=3, num_heldout_cells=2, with_corpus=False)
    assert {c.history for c in sweep_cells(config)} == {"other"}  # the realistic default
    both = sweep_cells(replace(config, histories=("other", "same")))
    assert [(c.index, c.history) for c in both] == [
        (index, history) for index in range(5) for history in ("other", "same")
    ]
    with pytest.raises(ValueError, match="unknown history"):
        SweepConfig(histories=("yesterday",))  # type: ignore[arg-type]


def test_a_cell_s_histories_are_other_prompts_the_same_prompts_or_none() -> None:
    cell = sweep_cells(replace(TINY, num_cells=1))[0]
    rollout, other = cell_traces(cell, TINY)
    _, same = cell_traces(replace(cell, history="same"), TINY)
    _, none = cell_traces(replace(cell, history="none"), TINY)
    assert none == [] and len(other) == len(same) == len(rollout)
    assert [t.group for t in same] == [t.group for t in rollout]
    assert [t.prompt_tokens for t in same] == [t.prompt_tokens for t in rollout]
    assert not {t.group for t in other} & {t.group for t in rollout}
    assert [t.prompt_tokens for t in other] != [t.prompt_tokens for t in rollout]
    again, other_again = cell_traces(cell, TINY)
    assert (again, other_again) == (rollout, other)
    _, next_other = cell_traces(cell, TINY, replication=1)
    assert [t.prompt_tokens for t in next_other] != [t.prompt_tokens for t in other]


def test_default_sweep_has_forty_tuning_cells_covering_the_grid_and_ten_heldout() -> None:
    every = sweep_cells(replace(SweepConfig(), with_corpus=False))
    cells = [c for c in every if c.split == "tuning"]
    heldout = [c for c in every if c.split == "heldout"]
    assert len(cells) == 40 and [c.index for c in every] == list(range(50))
    assert Counter(c.family for c in heldout) == dict.fromkeys(
        ("swe", "search", "math", "web", "mix"), 2
    )
    assert Counter(c.family for c in cells) == dict.fromkeys(
        ("swe", "search", "math", "web", "mix"), 8
    )
    assert {c.model for c in cells} == {"qwen3-8b", "qwen3-32b"}
    assert {c.num_gpus for c in cells} == {8, 16, 64}
    assert len({c.draw_seed for c in every}) == len(every)
    assert sweep_cells(replace(SweepConfig(), with_corpus=False)) == every


def test_named_presets_run_only_those() -> None:
    config = SweepConfig(
        families=("search-tail", "swe-long", "math-python"),
        num_cells=12,
        num_heldout_cells=0,
        with_corpus=False,
    )
    families = Counter(c.family for c in sweep_cells(config))
    assert families == dict.fromkeys(("search-tail", "swe-long", "math-python"), 4)
    assert {"search-tail", "swe-long", "math-python"} <= set(ZOO)


def test_kv_pressure_reaches_its_target_unless_the_fit_floor_binds() -> None:
    trace = ZOO["math"].generate(ZOO["math"].draw(__import__("random").Random(1)), 64, 1)
    capacity = cluster_kv_tokens("qwen3-8b", "h200", 8)
    pressure = kv_pressure([trace], "qwen3-8b", "h200", 8, 2.0)
    assert pressure.capacity_tokens == capacity
    assert pressure.footprint_tokens == sum(t.num_context_tokens for t in trace)
    tp1 = SimConfig(model="qwen3-8b").cost_for_tp(1).max_kv_tokens
    floor = FIT_MARGIN * max(t.num_context_tokens for t in trace) / tp1
    if pressure.natural_ratio / 2.0 >= floor:
        assert pressure.ratio == pytest.approx(2.0, rel=1e-3)
    else:
        assert pressure.kv_scale >= floor * 0.999 and pressure.ratio < 2.0
    slack = kv_pressure([trace], "qwen3-8b", "h200", 8, 1e-6)
    assert slack.kv_scale == 1.0 and slack.ratio == pytest.approx(slack.natural_ratio)
    config = scaled_config(SimConfig(model="qwen3-8b", num_gpus=8), pressure.kv_scale)
    assert config.cost_for_tp(2).max_kv_tokens == int(
        pressure.kv_scale * SimConfig(model="qwen3-8b").cost_for_tp(2).max_kv_tokens
    )
    with pytest.raises(ValueError, match="kv_scale"):
        scaled_config(SimConfig(), 1.5)


@pytest.fixture(scope="module")
def tiny_results() -> list[CellResult]:
    return run_sweep(TINY, jobs=1)


def test_a_tiny_sweep_runs_every_system_on_every_cell(tiny_results: list[CellResult]) -> None:
    assert [r.cell.index for r in tiny_results] == [0, 1]
    for result in tiny_results:
        assert set(result.runs) == set(TINY.systems) and not result.errors
        assert 8 <= result.num_trajectories <= 24
        assert result.lower_bound_s is not None
        for run in result.runs.values():
            assert run.makespan_s >= result.lower_bound_s > 0
            assert run.makespan_over_lb == pytest.approx(run.makespan_s / result.lower_bound_s)


def test_the_tiny_summary_matches_a_hand_computation(tiny_results: list[CellResult]) -> None:
    versus_best = []
    versus_no_sched = []
    for result in tiny_results:
        runs = {name: run.makespan_s for name, run in result.runs.items()}
        best = min(("verl", "slime"), key=lambda name: (runs[name], name))
        assert cell_ratios(result).best_baseline == best
        versus_best.append(runs["heddle"] / runs[best])
        versus_no_sched.append(runs["heddle"] / runs["heddle-no-sched"])
    summary = summarise_sweep(tiny_results)["all"]
    stats = summary.heddle_over_best_baseline
    assert stats is not None and stats.num_cells == 2
    assert stats.geomean == pytest.approx(math.sqrt(versus_best[0] * versus_best[1]))
    assert stats.worst == pytest.approx(max(versus_best))
    assert summary.heddle_over["heddle-no-sched"].geomean == pytest.approx(
        math.sqrt(versus_no_sched[0] * versus_no_sched[1])
    )
    assert set(summary.heddle_over) == {"heddle-no-sched"}  # baselines are not ablations
    assert summary.num_heddle_wins == sum(v < 0.98 for v in versus_best)
    lbs = sorted(r.runs["heddle"].makespan_over_lb for r in tiny_results)
    assert summary.median_makespan_over_lb["heddle"] == pytest.approx(sum(lbs) / 2)
    document = sweep_document(TINY, tiny_results, wall_s=1.0, jobs=1)
    parsed = json.loads(json.dumps(document, allow_nan=False))
    assert parsed["config"]["engine_model"] == "sglang"
    assert parsed["config"]["predictor"] == "online"
    assert set(parsed["summary"]) == {"all", "tuning", "heldout", "corpus"}
    assert set(parsed["summary_by_history"]) == {"other"}
    assert parsed["summary_by_history"]["other"] == parsed["summary"]
    assert parsed["cells"][0]["cell"]["history"] == "other"
    assert len(parsed["cells"]) == 2 and "ratios" in parsed["cells"][0]
    report = markdown_report(tiny_results)
    assert "heddle / best baseline" in report and report.count("| math |") == 2


def test_replications_average_each_system_over_epochs_and_keep_the_single_sample(
    tiny_results: list[CellResult],
) -> None:
    replicated = run_sweep(replace(TINY, replications=2), jobs=1)
    for single, result in zip(tiny_results, replicated, strict=True):
        assert set(result.runs) == set(TINY.systems) and not result.errors
        assert len(result.lower_bounds_s) == 2
        assert result.lower_bounds_s[0] == pytest.approx(single.lower_bound_s)
        assert result.lower_bound_s == pytest.approx(sum(result.lower_bounds_s) / 2)
        for name, run in result.runs.items():
            first, second = run.makespans_s
            assert first == pytest.approx(single.runs[name].makespan_s)  # replication 0
            assert run.makespan_s == pytest.approx((first + second) / 2)
            assert run.makespan_over_lb == pytest.approx(run.makespan_s / result.lower_bound_s)
        ratios = cell_ratios(result)
        runs = result.runs
        assert ratios.best_baseline == min(
            ("verl", "slime"), key=lambda name: (runs[name].makespan_s, name)
        )
        assert ratios.heddle_over_best_baseline_by_replication == pytest.approx(
            [
                runs["heddle"].makespans_s[i]
                / min(runs["verl"].makespans_s[i], runs["slime"].makespans_s[i])
                for i in (0, 1)
            ]
        )
    assert cell_ratios(tiny_results[0]).heddle_over_best_baseline_by_replication == []
    report = markdown_report(replicated, replace(TINY, replications=2))
    assert "2 replication(s)" in report and "in every replication" in report


def test_a_cell_counts_as_lost_in_every_replication_only_when_each_loses() -> None:
    def result(index: int, heddle: list[float], verl: list[float]) -> CellResult:
        runs = {
            name: replace(_run(sum(m) / len(m)), makespans_s=m)
            for name, m in (("heddle", heddle), ("verl", verl))
        }
        return replace(_result(index, {}), runs=runs)

    results = [
        result(0, [110, 110], [100, 100]),  # lost in both
        result(1, [130, 90], [100, 100]),  # lost by the mean, won in one
        result(2, [100, 100], [100, 100]),
    ]
    summary = summarise_sweep(results)["all"]
    assert summary.num_heddle_losses == 2
    assert summary.num_heddle_losses_every_replication == 1
    assert cell_ratios(results[1]).heddle_over_best_baseline_by_replication == [1.3, 0.9]


def test_replications_must_be_positive() -> None:
    with pytest.raises(ValueError, match="replications must be >= 1"):
        SweepConfig(replications=0)


def _run(makespan_s: float) -> SystemRun:
    return SystemRun(makespan_s, makespan_s / 100, 1.0, [1], 0, 0, 0, 0.0)


def _result(index: int, makespans: dict[str, float], split: str = "tuning") -> CellResult:
    cell = Cell(index, "math", index, "qwen3-8b", 8, 1.0)
    kv = KvPressure(1, 1, 1.0, 1.0, 1.0, 1.0)
    runs = {name: _run(m) for name, m in makespans.items()}
    return CellResult(cell, split, 8, 8, 1, kv, 100.0, runs)  # type: ignore[arg-type]


def test_ratios_pick_the_best_baseline_by_kind_and_summarise_per_split() -> None:
    results = [
        _result(0, {"heddle": 90, "verl": 100, "slime": 120, "fix-1": 180, "rr": 90}),
        _result(1, {"heddle": 110, "verl": 100, "autellix": 55, "fix-1": 110}, "heldout"),
        _result(2, {"heddle": 99, "verl": 100, "fix-1": 33}),
    ]
    ratios = cell_ratios(results[1])
    assert ratios.best_baseline == "autellix" and ratios.heddle_over_best_baseline == 2.0
    assert ratios.heddle_over == {"fix-1": 1.0}
    summary = summarise_sweep(results)
    everything = summary["all"].heddle_over_best_baseline
    assert everything is not None
    assert everything.geomean == pytest.approx((0.9 * 2.0 * 0.99) ** (1 / 3))
    assert (everything.worst, everything.worst_cell) == (2.0, 1)
    assert summary["all"].num_heddle_wins == 1 and summary["all"].num_heddle_losses == 1
    assert summary["tuning"].num_cells == 2 and summary["heldout"].num_cells == 1
    assert summary["corpus"].num_cells == 0
    fix1 = summary["tuning"].heddle_over["fix-1"]
    assert fix1.geomean == pytest.approx(math.sqrt(0.5 * 3.0)) and fix1.worst == 3.0
    assert summary["all"].median_makespan_over_lb["heddle"] == pytest.approx(0.99)
    assert ratios.lb_over_best_baseline == pytest.approx(100 / 55)
    headroom = summary["all"].lb_over_best_baseline
    assert headroom is not None and headroom.geomean == pytest.approx((100 / 55) ** (1 / 3))
    assert ratio_stats([]) is None


def test_corpus_cells_stay_out_of_the_zoo_s_splits_and_each_history_has_its_summary() -> None:
    zoo = [_result(0, {"heddle": 90, "verl": 100}), _result(1, {"heddle": 99, "verl": 100})]
    same = [replace(r, cell=replace(r.cell, history="same")) for r in zoo]
    same = [replace(same[0], runs={n: _run(m) for n, m in (("heddle", 120), ("verl", 100))})]
    corpus = replace(_result(5, {"heddle": 150, "verl": 100}), split="corpus")
    results = [*zoo, *same, corpus]
    other_summary = summarise_sweep(results, "other")
    assert other_summary["all"].num_cells == 2 and other_summary["corpus"].num_cells == 1
    stats = other_summary["all"].heddle_over_best_baseline
    assert stats is not None and stats.worst == pytest.approx(0.99)
    corpus_stats = other_summary["corpus"].heddle_over_best_baseline
    assert corpus_stats is not None and corpus_stats.worst == pytest.approx(1.5)
    same_stats = summarise_sweep(results, "same")["all"].heddle_over_best_baseline
    assert same_stats is not None and same_stats.worst == pytest.approx(1.2)
    config = replace(TINY, histories=("other", "same"))
    document = sweep_document(config, results, wall_s=1.0, jobs=1)
    assert set(document["summary_by_history"]) == {"other", "same"}
    assert document["summary"] == document["summary_by_history"]["other"]
    report = markdown_report(results, config)
    assert "history `other`" in report and "history `same`" in report


def test_the_reference_is_reported_apart_from_the_systems() -> None:
    config = replace(TINY, num_cells=1, systems=("heddle", "verl"), reference=True)
    (result,) = run_sweep(config, jobs=1)
    assert result.reference_s is not None and result.reference_tp_degrees
    ratios = cell_ratios(result)
    assert ratios.best_baseline == "verl"  # the reference is never a baseline
    assert ratios.heddle_over_reference == pytest.approx(
        result.runs["heddle"].makespan_s / result.reference_s
    )
    assert ratios.reference_over_lb == pytest.approx(result.reference_s / result.lower_bound_s)
    summary = summarise_sweep([result])["all"]
    assert summary.heddle_over_reference is not None
    assert "best-known reference" in markdown_report([result], config)
    assert json.dumps(sweep_document(config, [result], 1.0, 1))  # JSON-ready


def test_a_cell_reports_the_cap_a_baseline_ran() -> None:
    """A baseline's concurrency cap (what the plan check picked) is in the cell's run."""
    trace = generate("math", 12, seed=3)
    result = simulate(trace, "slime", SimConfig(model="qwen3-8b", num_gpus=2), concurrency_cap=4)
    assert result.concurrency_cap == 4
    assert mean_run([(result, 1.0)], result.lower_bound_s).concurrency_cap == 4
