"""The KV-attributed decode work: lines, their envelope, and the bound on real batching runs."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.batching import BatchingConfig, BatchingModel, GenerationJob
from heddle.policy.cost.model import QWEN3_8B, AnalyticCostModel, Hardware, preset
from heddle.policy.cost.profiles import Profile
from heddle.policy.kv_work import (
    Envelope,
    TokenCostLine,
    _linear_minorant,
    kv_decode_gpu_s,
    token_cost_line,
    token_cost_lines,
)

# Just over the weights: a few thousand KV tokens, so the capacity binds in small tests.
SMALL = Hardware("small", 18.5e9, 3.08e12, 640e12, 0.65 * 989e12)

lines = st.lists(
    st.builds(
        TokenCostLine,
        tp_degree=st.sampled_from([1, 2, 4, 8]),
        base_gpu_s=st.floats(0.0, 1e-3),
        per_context_gpu_s=st.floats(0.0, 1e-6),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=150)
@given(lines=lines, first=st.integers(0, 50_000), count=st.integers(0, 3000))
def test_envelope_sums_the_cheapest_line_of_every_token(
    lines: list[TokenCostLine], first: int, count: int
) -> None:
    brute = math.fsum(min(line.at(c) for line in lines) for c in range(first, first + count))
    assert Envelope(lines).range_gpu_s(first, count) == pytest.approx(brute, rel=1e-9, abs=1e-15)


@settings(max_examples=150)
@given(st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=40))
def test_linear_minorant_stays_below_every_point(fixed: list[float]) -> None:
    shared, per_sequence = _linear_minorant(fixed)
    assert shared >= 0.0
    for batch, value in enumerate(fixed, start=1):
        assert shared + per_sequence * batch <= value + 1e-12


def test_analytic_lines_are_exact_and_enumeration_agrees() -> None:
    model = preset("qwen3-32b", "h200", 2)
    exact = token_cost_line(2, model, 1)
    profile = Profile({2: {1: model.decode_step_s(1, 0) * 1e3}}, "qwen3-32b", "h200")
    assert exact is not None and exact.base_gpu_s == pytest.approx(2 * 0.11e-3 * 0.82)
    fixed, per_context = model.decode_floor_terms(1)
    expected = 2 * ((fixed - 0.11e-3 * 0.82) / model.max_kv_tokens + per_context)
    assert exact.per_context_gpu_s == pytest.approx(expected)
    # A profile (no linear terms) with too many admissible batches gets no line.
    assert token_cost_line(2, profile.cost_model(2), 1) is None
    assert token_cost_lines({2: model, 4: profile.cost_model(2)}, 1) == []


def _run_worker(model: AnalyticCostModel, jobs: list[tuple[int, int, int]], seed: int) -> float:
    """Serve ``(prompt, output, arrival_s)`` jobs on one real batching model, random
    priorities, preemption, prefix cache and preemption semantics; the time the last one
    finishes."""
    rng = random.Random(seed)
    config = BatchingConfig(
        preemptive=rng.random() < 0.5,
        cache=rng.choice(["radix", "trajectory"]),
        preemption_keeps_kv=rng.random() < 0.5,
    )
    engine = BatchingModel(model, config)
    pending = sorted(
        (arrival, index, prompt, output) for index, (prompt, output, arrival) in enumerate(jobs)
    )
    last = 0.0
    while pending or engine.next_event_time() is not None:
        wake = engine.next_event_time()
        if pending and (wake is None or pending[0][0] <= wake):
            arrival, index, prompt, output = pending.pop(0)
            job = GenerationJob(f"j{index}", f"t{index}", prompt, prompt, output, rng.random())
            engine.submit(job, float(arrival))
            continue
        assert wake is not None
        for done in engine.advance(wake):
            last = max(last, done.finished_at)
        assert engine.invariant_violations() == []
    return last


@settings(max_examples=40)
@given(
    jobs=st.lists(
        st.tuples(st.integers(1, 600), st.integers(1, 300), st.integers(0, 3)),
        min_size=1,
        max_size=12,
    ),
    seed=st.integers(0, 1000),
)
def test_kv_work_never_exceeds_a_kv_limited_engine(
    jobs: list[tuple[int, int, int]], seed: int
) -> None:
    model = AnalyticCostModel(QWEN3_8B, SMALL, 1)
    jobs = [(p, o, a) for p, o, a in jobs if p + o <= model.max_kv_tokens]
    if not jobs:
        return
    line = token_cost_line(1, model, min(p for p, _, _ in jobs))
    assert line is not None
    decode_gpu_s = kv_decode_gpu_s(((p, o, 0.0) for p, o, _ in jobs), [line])
    prefill_s = model.prefill_s(sum(p for p, _, _ in jobs))
    # The engine decodes every output token (o steps from context p) and prefills each prompt.
    assert decode_gpu_s + prefill_s <= _run_worker(model, jobs, seed) * (1 + 1e-9)


def _run_radix_worker(
    model: AnalyticCostModel, jobs: list[tuple[int, int, int]], prompts: list[int], seed: int
) -> float:
    """Serve ``(group, output, arrival_s)`` jobs, each on its group's prompt (``prompts``), on
    one batching model with SGLang's radix cache: a group's prompt is held once."""
    rng = random.Random(seed)
    config = BatchingConfig(preemptive=rng.random() < 0.5, cache="radix", preemption_keeps_kv=False)
    engine = BatchingModel(model, config)
    pending = sorted((a, i, g, o) for i, (g, o, a) in enumerate(jobs))
    last = 0.0
    while pending or engine.next_event_time() is not None:
        wake = engine.next_event_time()
        if pending and (wake is None or pending[0][0] <= wake):
            arrival, index, group, output = pending.pop(0)
            prompt = prompts[group]
            job = GenerationJob(
                f"j{index}", f"t{index}", prompt, prompt, output, rng.random(), f"g{group}", prompt
            )
            engine.submit(job, float(arrival))
            continue
        assert wake is not None
        for done in engine.advance(wake):
            last = max(last, done.finished_at)
        assert engine.invariant_violations() == []
    return last


@settings(max_examples=60)
@given(
    prompts=st.lists(st.integers(1, 1500), min_size=1, max_size=3),
    jobs=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 200), st.integers(0, 2)),
        min_size=1,
        max_size=16,
    ),
    seed=st.integers(0, 1000),
)
def test_kv_work_with_shared_prompts_never_exceeds_a_radix_engine(
    prompts: list[int], jobs: list[tuple[int, int, int]], seed: int
) -> None:
    """Grouped jobs hold their prompt once in the KV but read it each: the line charges a token
    the KV it holds (its context less the share of the prompt its siblings may hold)."""
    model = AnalyticCostModel(QWEN3_8B, SMALL, 1)
    jobs = [(g % len(prompts), o, a) for g, o, a in jobs]
    jobs = [(g, o, a) for g, o, a in jobs if prompts[g] + o <= model.max_kv_tokens]
    if not jobs:
        return
    sizes = Counter(g for g, _, _ in jobs)
    line = token_cost_line(1, model, min(prompts[g] / sizes[g] for g in sizes))
    assert line is not None
    ranges = ((prompts[g], o, prompts[g] * (1 - 1 / sizes[g])) for g, o, _ in jobs)
    decode_gpu_s = kv_decode_gpu_s(ranges, [line])
    prefill_s = model.prefill_s(sum(prompts[g] for g in sizes))
    assert decode_gpu_s + prefill_s <= _run_radix_worker(model, jobs, prompts, seed) * (1 + 1e-9)


def test_kv_term_binds_when_long_contexts_fill_the_cache() -> None:
    """1500-token contexts fill most of the small cache: the engine decodes one at a time and
    pays each step's fixed cost alone. One short job makes large batches look possible to the
    per-batch term, so only the KV-aware term sees the cost."""
    from heddle.policy.lower_bound import makespan_lower_bound
    from heddle.traces import TraceStep, TraceTrajectory

    model = AnalyticCostModel(QWEN3_8B, SMALL, 1)
    jobs = [(1500, 100, 0)] * 30 + [(10, 5, 0)]
    simulated = _run_worker(model, jobs, seed=1)
    workload = [
        TraceTrajectory(id=f"t{i}", prompt_tokens=p, steps=[TraceStep(output_tokens=o)])
        for i, (p, o, _) in enumerate(jobs)
    ]
    options = {"prompt_sharing": "none", "overlapped_prefill": False}
    old = makespan_lower_bound(workload, 1, {1: model}, kv_aware=False, **options)
    new = makespan_lower_bound(workload, 1, {1: model}, **options)
    assert new.makespan_s == new.kv_work_s <= simulated
    assert new.makespan_s >= 0.85 * simulated
    assert old.makespan_s < 0.5 * simulated
