"""Profile simulation of plans: a lone trajectory's group time is its solo time, and the plan
check never returns a configuration slower on the history than the analytic one (by the
profile, then by the full simulation past the switch margin, for every bundle alike)."""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest
from solo_time import analytic_solo_s

from heddle.control.bundle import engine_config
from heddle.control.systems import SystemSpec, system_spec
from heddle.ids import trajectory_id
from heddle.policy.batching import BatchingConfig
from heddle.policy.prediction import Progress
from heddle.sim import SimConfig, SimResult, make_simulation_predictor, plan_workers, planning
from heddle.sim.on_workers import cross_fitted
from heddle.sim.planning import (
    SHORTLIST_SHARE,
    SHORTLIST_SIZE,
    SWITCH_MARGIN,
    Plan,
    _even_groups,
    _history_placement_lengths,
    _presorted_groups,
    choose_workers,
    full_check_makespans,
    planning_lengths,
    shortlisted,
    switched_pick,
)
from heddle.sim.profile import group_makespan_s, simulated_plan_makespan_s
from heddle.traces import TraceStep, TraceTrajectory
from heddle.workloads import generate

MODEL = "qwen3-8b"


def test_a_lone_group_takes_its_solo_time() -> None:
    lone = TraceTrajectory(
        id="a",
        prompt_tokens=500,
        steps=[TraceStep(output_tokens=200, tool_s=3.0, tool_output_tokens=50)] * 3,
    )
    config = SimConfig(model=MODEL)
    seconds = group_makespan_s([lone], config.cost_for_tp(1), BatchingConfig(), lambda i, t: 0.0)
    assert seconds == pytest.approx(analytic_solo_s(lone, config.cost_for_tp(1)), rel=1e-9)


def test_a_plan_is_as_slow_as_its_slowest_worker() -> None:
    trace = generate("search", 24, seed=1)
    config = SimConfig(model=MODEL)
    engine = BatchingConfig()
    one = simulated_plan_makespan_s([trace], [2], config.cost_for_tp, engine, lambda i, t: 0.0)
    split = simulated_plan_makespan_s(
        [trace[:12], trace[12:]], [1, 1], config.cost_for_tp, engine, lambda i, t: 0.0
    )
    alone = [
        group_makespan_s(g, config.cost_for_tp(1), engine, lambda i, t: 0.0)
        for g in (trace[:12], trace[12:])
    ]
    assert split == max(alone) and one > 0


@pytest.mark.parametrize("system", ["heddle", "verl", "fix-1"])
def test_the_chosen_plan_is_no_slower_on_the_history(system: str) -> None:
    trace = generate("coding", 32, seed=4)
    history = generate("coding", 32, seed=4, epoch=1)
    config = SimConfig(model=MODEL, num_gpus=8)
    spec = system_spec(system)
    predictor = make_simulation_predictor(trace, config, history) if spec.uses_predictions else None
    analytic = plan_workers(trace, spec, config, predictor)
    chosen = choose_workers(trace, spec, config, predictor, history)
    assert sum(chosen) <= 8
    if system == "fix-1":
        assert chosen == analytic == [1] * 8  # a fixed degree is kept
        return
    engine = replace(engine_config(spec, config.engine), max_running=config.max_running)

    placed_by = _history_placement_lengths(trace, history, spec, predictor)

    def score(tps: list[int]) -> float:
        groups = (
            _presorted_groups(history, placed_by, tps, config, 1.0, 0.0)
            if spec.placement == "presorted"
            else _even_groups(history, len(tps))
        )
        priority = (
            (lambda i, t: float(t.num_output_tokens))
            if engine.preemptive
            else (lambda i, t: -float(i))
        )
        return simulated_plan_makespan_s(groups, tps, config.cost_for_tp, engine, priority)

    candidates = [analytic] + [
        [tp] * (8 // tp) for tp in (1, 2, 4, 8) if [tp] * (8 // tp) != analytic
    ]
    profile_pick = min(candidates, key=score)
    assert score(profile_pick) <= score(analytic) * (1 + 1e-9)
    if chosen == profile_pick:
        return
    # The full check moved the bundle off the profile's pick: only to a shortlisted plan that its
    # simulation of the whole control plane on the history rates faster by the margin.
    assert score(chosen) <= score(profile_pick) * (1 + SHORTLIST_SHARE)
    options = [Plan(tuple(chosen)), Plan(tuple(profile_pick))]
    full = full_check_makespans(history, spec, config, options)
    assert full[0] < full[1] * (1 - SWITCH_MARGIN)


def test_the_full_check_predicts_no_history_trajectory_from_itself() -> None:
    history = generate("coding", 24, seed=3, epoch=1)
    config = SimConfig(model=MODEL, predictor="online")
    longer = list(history)
    first = history[0]
    longer[0] = msgspec.structs.replace(
        first, steps=[msgspec.structs.replace(s, output_tokens=9000) for s in first.steps]
    )
    at_submission = Progress(trajectory_id(0), first.group, first.prompt_tokens)
    runs = (history, longer)
    in_sample = [make_simulation_predictor(h, config, h).predict(at_submission) for h in runs]
    cross = [cross_fitted(h, config).predict(at_submission) for h in runs]
    assert in_sample[0] != in_sample[1]  # fitted on itself, its own length moves it
    assert cross[0] == cross[1]


def test_the_shortlist_is_the_profiles_fastest_within_the_share() -> None:
    scores = [100.0, 140.0, 105.0, 109.0, 100.0, 111.0]
    assert shortlisted(scores) == [0, 4, 2][:SHORTLIST_SIZE]
    assert shortlisted([50.0]) == [0]
    assert shortlisted([50.0, 80.0]) == [0]  # nothing else close: no full check


@pytest.mark.parametrize(
    ("full", "expected"),
    [
        ([100.0, 99.0, 101.0], 0),  # 1% faster is within the noise of one sample: keep
        ([100.0, 97.0, 95.0], 2),  # the fastest, once it clears the margin
        ([100.0, 100.0 * (1 - SWITCH_MARGIN), 120.0], 0),  # exactly the margin: keep
        ([100.0], 0),
    ],
)
def test_the_full_check_switches_only_past_the_margin(full: list[float], expected: int) -> None:
    assert switched_pick(full) == expected


@pytest.mark.parametrize("system", ["heddle", "verl", "heddle-no-place", "thunderagent"])
def test_every_bundle_is_checked_in_full(system: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same plan check for all: whenever the profile shortlists two plans, the whole
    control plane of the bundle, a baseline's too, runs on the history on each."""
    trace = generate("coding", 16, seed=4)
    history = generate("coding", 16, seed=4, epoch=1)
    config = SimConfig(model=MODEL, num_gpus=4)
    spec = system_spec(system)
    checked: list[list[tuple[int, ...]]] = []
    real = planning.full_check_runs

    def spy(
        history: list[TraceTrajectory], spec: SystemSpec, config: SimConfig, options: list[Plan]
    ) -> list[SimResult]:
        checked.append([option.tp_degrees for option in options])
        return real(history, spec, config, options)

    monkeypatch.setattr(planning, "shortlisted", lambda scores: [0, 1])
    monkeypatch.setattr(planning, "full_check_runs", spy)
    predictor = make_simulation_predictor(trace, config, history) if spec.uses_predictions else None
    chosen = choose_workers(trace, spec, config, predictor, history)
    assert len(checked[0]) == 2 and tuple(chosen) in checked[0]


def test_the_profile_check_places_the_history_by_the_rollouts_predictions() -> None:
    """No placer knows a trajectory's outcome in advance: the history is split by what the
    live rollout is placed by (the same prompt's prediction), not by its own lengths."""
    trace = generate("math", 32, seed=2)
    history = generate("math", 32, seed=2, epoch=1)
    config = SimConfig(model=MODEL, num_gpus=8)
    spec = system_spec("heddle")
    predictor = make_simulation_predictor(trace, config, history)
    predicted = planning_lengths(trace, spec, predictor)
    assert _history_placement_lengths(trace, history, spec, predictor) == predicted
    assert predicted != [float(t.num_output_tokens) for t in history]
    # Other prompts: each history trajectory takes its group's mean prediction in the trace.
    shuffled = history[8:] + history[:8]
    by_group: dict[str, list[float]] = {}
    for t, length in zip(trace, predicted, strict=True):
        by_group.setdefault(t.group, []).append(length)
    expected = [sum(by_group[t.group]) / len(by_group[t.group]) for t in shuffled]
    assert _history_placement_lengths(trace, shuffled, spec, predictor) == pytest.approx(expected)
    # Bundles that do not predict are placed by routers: the history's own lengths.
    verl = system_spec("verl")
    assert _history_placement_lengths(trace, history, verl, None) == [
        float(t.num_output_tokens) for t in history
    ]


def test_a_predicting_ablation_plans_with_what_heddle_knows() -> None:
    """heddle-no-resource differs from heddle in its TP plan only: it plans, and places the
    history in its plan check, by the same first predictions, never by the rollout's or the
    history's own lengths (which only the baselines, which do not predict, are given)."""
    trace = generate("math", 32, seed=2)
    history = generate("math", 32, seed=2, epoch=1)
    config = SimConfig(model=MODEL, num_gpus=8)
    predictor = make_simulation_predictor(trace, config, history)
    heddle = planning_lengths(trace, system_spec("heddle"), predictor)
    ablation = system_spec("heddle-no-resource")
    assert ablation.resources == "homogeneous"
    assert planning_lengths(trace, ablation, predictor) == heddle
    assert _history_placement_lengths(trace, history, ablation, predictor) == heddle
    assert heddle != [float(t.num_output_tokens) for t in trace]
    assert planning_lengths(trace, system_spec("verl"), None) == [
        float(t.num_output_tokens) for t in trace
    ]
    with pytest.raises(ValueError, match="needs a predictor"):
        planning_lengths(trace, system_spec("heddle"), None)
