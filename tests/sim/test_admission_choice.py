"""Heddle's admission chosen on the history (issue 36, item 5): the settings the plan check tries
for a bundle with KV admission, the control plane each one builds, the pick (the default unless
another is faster on the history by the switch margin), and ``heddle-static-cap``, heddle with the
static cap a baseline gets in place of KV admission."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from heddle.control.bundle import ControlOptions, build_bundle
from heddle.control.placement import (
    AdmissionConfig,
    KvAdmissionGate,
    PlacementDecider,
    TrajectoryCap,
)
from heddle.control.systems import SYSTEMS, system_spec
from heddle.experiments.kv_pressure import scaled_config
from heddle.sim import SimConfig, planning, simulate
from heddle.sim.admission_choice import (
    DEFAULT_OVERCOMMIT,
    OVERCOMMITS,
    STATIC_CAP_MULTIPLIER,
    AdmissionSetting,
    admission_settings,
)
from heddle.sim.concurrency_caps import cap_candidates, effective_cap
from heddle.sim.on_workers import make_simulation_predictor
from heddle.sim.planning import SWITCH_MARGIN, Plan, choose_system_plan, full_check_makespans
from heddle.workloads import generate

MODEL = "qwen3-8b"


def starved() -> tuple[SimConfig, list, list]:  # type: ignore[type-arg]
    """48 coding trajectories on 4 H200 with 15% of their KV: far past the KV pool."""
    trace = generate("coding", 48, seed=4)
    history = generate("coding", 48, seed=4, epoch=1)
    return scaled_config(SimConfig(model=MODEL, num_gpus=4), 0.15), trace, history


def test_the_settings_start_with_the_default_and_end_with_none() -> None:
    config, trace, history = starved()
    settings = admission_settings((2, 2), config, trace, history)
    assert settings[0] == AdmissionSetting("default", DEFAULT_OVERCOMMIT)
    assert [s.overcommit for s in settings[1:3]] == list(OVERCOMMITS)
    kv = 2 * config.cost_for_tp(2).max_kv_tokens
    mean_context = sum(t.num_context_tokens for t in history) / len(history)
    cap = math.floor(STATIC_CAP_MULTIPLIER * kv / mean_context)
    assert 1 <= cap < len(trace)
    assert settings[3] == AdmissionSetting(cap)  # the static cap a baseline would get
    assert settings[4] == AdmissionSetting("off")
    assert admission_settings((2, 2), config, trace, []) == [AdmissionSetting()]
    roomy = SimConfig(model=MODEL, num_gpus=4)  # a cap that admits every trajectory: not tried
    assert all(
        s.cap in ("default", "off") for s in admission_settings((2, 2), roomy, trace, history)
    )


def _admission_of(setting: AdmissionSetting) -> tuple[object, str]:
    """The admission the heddle control plane runs under ``setting``, and its label."""
    options = ControlOptions(
        cost_for_tp=SimConfig(model=MODEL).cost_for_tp,
        predictor=make_simulation_predictor(generate("coding", 4, seed=1), SimConfig()),
        concurrency_cap=setting.cap,
        admission=AdmissionConfig(overcommit=setting.overcommit),
    )
    control = build_bundle(system_spec("heddle"), options)
    placement = next(d for d in control.deciders if isinstance(d, PlacementDecider))
    return placement._admission, control.admission


def test_each_setting_builds_its_admission() -> None:
    gate, label = _admission_of(AdmissionSetting(overcommit=1.5))
    assert isinstance(gate, KvAdmissionGate) and gate.admission.config.overcommit == 1.5
    assert label == "kv x1.5"
    cap, label = _admission_of(AdmissionSetting(cap=7))
    assert isinstance(cap, TrajectoryCap) and label == "cap 7"
    none, label = _admission_of(AdmissionSetting(cap="off"))
    assert not isinstance(none, KvAdmissionGate | TrajectoryCap) and label == "off"


def test_heddle_keeps_its_default_unless_another_setting_is_faster_on_the_history() -> None:
    config, trace, history = starved()
    spec = system_spec("heddle")
    predictor = make_simulation_predictor(trace, config, history)
    plan = choose_system_plan(trace, spec, config, predictor, history)
    default = Plan(plan.tp_degrees)
    if plan != default:
        kept, chosen = full_check_makespans(history, spec, config, [default, plan])
        assert chosen < kept * (1 - SWITCH_MARGIN)
    result = simulate(trace, spec, config, history=history)
    expected = {"default": f"kv x{plan.overcommit:g}", "off": "off"}.get(
        str(plan.concurrency_cap), f"cap {plan.concurrency_cap}"
    )
    assert result.admission == expected
    assert simulate(trace, "verl", config, history=history).admission is None


def test_heddle_static_cap_is_heddle_with_a_baselines_cap_for_admission() -> None:
    spec = SYSTEMS["heddle-static-cap"]
    heddle = SYSTEMS["heddle"]
    assert spec.kind == "ablation" and not spec.admits and spec.concurrency is not None
    assert (spec.priority, spec.placement, spec.migration, spec.resources) == (
        heddle.priority,
        heddle.placement,
        heddle.migration,
        heddle.resources,
    )
    config, trace, history = starved()
    caps = cap_candidates(spec, (2, 2), config, trace, history)
    assert caps[0] == "default" and effective_cap(spec, "default", 2, trace) is None
    assert len(caps) > 1  # the KV-derived caps a baseline gets
    result = simulate(trace, spec, config, history=history)
    assert result.num_failed == 0 and result.admission is None


@pytest.mark.parametrize("engine", ["sglang", "torch"])
def test_heddle_static_cap_finishes_a_kv_starved_rollout(engine: str) -> None:
    config, trace, history = starved()
    config = scaled_config(SimConfig(model=MODEL, num_gpus=4, engine_model=engine), 0.15)
    assert simulate(trace, "heddle-static-cap", config, history=history).num_failed == 0


def test_a_chosen_setting_reruns_the_other_shortlisted_plans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under the default, 2 x TP2 wins the full check; overcommit 1.0 is then 10% faster on it,
    and on 1 x TP4 another 10%: the plan check moves to 1 x TP4 at overcommit 1.0. The made-up
    makespans stand for the full check's simulations (only the choice is under test)."""
    config, trace, history = starved()
    fast = {((2, 2), "default", 1.2): 100.0, ((4,), "default", 1.2): 101.0}
    fast[((2, 2), "default", 1.0)] = 90.0
    fast[((4,), "default", 1.0)] = 80.0
    ran: list[Plan] = []

    def full_check_runs(
        history: object, spec: object, config: object, options: list[Plan]
    ) -> list[SimpleNamespace]:
        ran.extend(options)
        keys = [(o.tp_degrees, o.concurrency_cap, o.overcommit) for o in options]
        return [SimpleNamespace(makespan_s=fast.get(k, 200.0), num_evicted_tokens=0) for k in keys]

    monkeypatch.setattr(planning, "shortlisted", lambda scores: [0, 1])
    monkeypatch.setattr(planning, "full_check_runs", full_check_runs)
    monkeypatch.setattr(planning, "plan_workers", lambda *args, **kwargs: [2, 2])
    monkeypatch.setattr(planning, "TP_DEGREES", (4,))
    spec = system_spec("heddle")
    predictor = make_simulation_predictor(trace, config, history)
    plan = choose_system_plan(trace, spec, config, predictor, history)
    assert plan == Plan((4,), "default", 1.0)
    assert Plan((4,), "default", 1.0) in ran
    # Where the default setting stays, no plan runs twice.
    fast[((2, 2), "default", 1.0)] = 99.0
    ran.clear()
    assert choose_system_plan(trace, spec, config, predictor, history) == Plan((2, 2))
    assert len({(o.tp_degrees, o.concurrency_cap, o.overcommit) for o in ran}) == len(ran)
