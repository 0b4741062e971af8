"""KV admission counts a prompt that trajectories share (a GRPO group's, in SGLang's radix cache)
once per worker: a worker's load and projections against brute force, the admissions they allow,
and the gate that keys a group's prompt only when the engines share it."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.control.placement import (
    AdmissionConfig,
    Footprint,
    KvAdmission,
    KvAdmissionGate,
    held_footprints,
    projected_peak,
)
from heddle.control.placement.admission import AdmissionRequest
from heddle.policy.scheduling.priority import priority_policy

KEYS = ("", "a", "b")


@st.composite
def shared_footprint(draw: st.DrawFn) -> Footprint:
    """A footprint whose context may start with a prompt shared under key ``a`` or ``b``."""
    key = draw(st.sampled_from(KEYS))
    prompt = draw(st.integers(0, 400)) if key else 0
    own = draw(st.integers(0, 300))
    growth = draw(st.integers(0, 300))
    duration = draw(st.one_of(st.just(math.inf), st.integers(1, 100).map(float)))
    return Footprint(float(prompt + own), float(growth), duration, float(prompt), key)


shared_footprints = st.lists(shared_footprint(), min_size=1, max_size=12)


def _held_at(footprints: list[Footprint], time_s: float) -> float:
    """Brute force: what the footprints hold at ``time_s``: each present one's own part, and the
    largest prompt of each key while any footprint of that key is present."""
    total = 0.0
    prompts: dict[str, float] = {}
    for f in footprints:
        if time_s >= f.duration_s:
            continue
        fraction = min(time_s / f.duration_s, 1.0)
        total += f.context_tokens - (f.shared_tokens if f.shared_key else 0.0)
        total += f.growth_tokens * fraction
        if f.shared_key:
            prompts[f.shared_key] = max(prompts.get(f.shared_key, 0.0), f.shared_tokens)
    return total + sum(prompts.values())


def _summed_peaks(footprints: list[Footprint]) -> float:
    """Brute force: the peaks summed, each key's largest prompt once."""
    prompts: dict[str, float] = {}
    total = 0.0
    for f in footprints:
        total += f.peak_tokens
        if f.shared_key:
            total -= f.shared_tokens
            prompts[f.shared_key] = max(prompts.get(f.shared_key, 0.0), f.shared_tokens)
    return total + sum(prompts.values())


@settings(max_examples=200)
@given(footprints=shared_footprints)
def test_a_shared_prompt_is_projected_once(footprints: list[Footprint]) -> None:
    """Against a dense scan of time: with one prompt size per key (a group's), the projection
    finds the most held at any time; it never counts more than every copy would."""
    by_key: dict[str, float] = {}
    footprints = [
        Footprint(
            f.context_tokens - f.shared_tokens + by_key.setdefault(f.shared_key, f.shared_tokens),
            f.growth_tokens,
            f.duration_s,
            by_key[f.shared_key],
            f.shared_key,
        )
        for f in footprints
    ]
    ends = sorted({f.duration_s for f in footprints if math.isfinite(f.duration_s)})
    times = [0.0] + [end * (1 - 1e-9) for end in ends] + [end * 0.5 for end in ends]
    brute = max(_held_at(footprints, t) for t in times)
    projected = projected_peak(held_footprints(footprints))
    assert math.isclose(projected, brute, rel_tol=1e-6, abs_tol=1e-6)
    assert projected <= projected_peak(footprints) + 1e-6


operations = st.lists(
    st.one_of(
        st.tuples(st.just("hold"), st.integers(0, 15), shared_footprint()),
        st.tuples(st.just("update"), st.integers(0, 15), shared_footprint()),
        st.tuples(st.just("release"), st.integers(0, 15)),
        st.tuples(st.just("admit"), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300)
@given(
    ops=operations,
    budgets=st.lists(st.integers(100, 1500), min_size=1, max_size=3),
    projection=st.booleans(),
)
def test_workers_count_each_shared_prompt_once(
    ops: list[tuple[object, ...]], budgets: list[int], projection: bool
) -> None:
    """After any holds, updates, releases and admissions, each worker's load is its residents'
    peaks with each key's prompt once, it answers ``fits`` as brute force does, and a worker that
    admits in a pass ends it within its budget."""
    admission = KvAdmission(AdmissionConfig(overcommit=1.0, projection=projection))
    workers = [f"w{i}" for i in range(len(budgets))]
    for worker, budget in zip(workers, budgets, strict=True):
        admission.add_worker(worker, budget)
    for op in ops:
        match op:
            case ("hold", int(i), Footprint() as footprint):
                admission.hold(("r", f"t{i}"), float(i), footprint, workers[i % len(workers)])
            case ("update", int(i), Footprint() as footprint):
                admission.update(("r", f"t{i}"), footprint)
            case ("release", int(i)):
                admission.release(("r", f"t{i}"))
            case _:
                before = {w: len(s.residents) for w, s in admission._workers.items()}
                for _, worker in admission.admit(workers):
                    assert worker is not None
                    residents = list(admission._workers[worker].residents.values())
                    if before[worker] and projection:
                        assert projected_peak(held_footprints(residents)) <= budgets[
                            workers.index(worker)
                        ] * (1 + 1e-9)
                    elif before[worker]:
                        assert _summed_peaks(residents) <= budgets[workers.index(worker)] + 1e-6
        for state in admission._workers.values():
            residents = list(state.residents.values())
            assert math.isclose(state.load, _summed_peaks(residents), abs_tol=1e-6)
            for held in admission._held.values():
                with_it = [*residents, held.footprint]
                fresh = (
                    not residents
                    or _summed_peaks(with_it) <= state.budget + 1e-9
                    or (projection and projected_peak(held_footprints(with_it)) <= state.budget)
                )
                assert state.fits(held.footprint) == fresh


def _group_admitted_at_once(share_prompts: bool) -> int:
    """16 samples of a 6,000-token prompt, each to write 100 tokens, planned on one worker of
    8,000 tokens of KV: how many start at once."""
    gate = KvAdmissionGate(
        AdmissionConfig(overcommit=1.0), priority_policy("pps"), share_prompts=share_prompts
    )
    gate.add_worker("w0", 8000)
    for index in range(16):
        gate.plan(
            AdmissionRequest(
                key=("r", f"s{index}"),
                planned_worker_id="w0",
                submitted_at=0.0,
                index=index,
                context_tokens=6000,
                predicted_remaining_tokens=50.0,
                predicted_remaining_tool_s=0.0,
                group_id="g",
            )
        )
    return len(gate.admit(["w0"]))


def test_a_group_on_a_shared_prompt_starts_together_where_the_engine_shares_it() -> None:
    """The group's prompt plus 16 x 100 tokens fits the worker: all start where the engine holds
    the prompt once (SGLang), one at a time where each sample holds its own copy (torch)."""
    assert _group_admitted_at_once(share_prompts=True) == 16
    assert _group_admitted_at_once(share_prompts=False) == 1
