"""The continuous-batching model: analytic solo time, chunked decode against a token-by-token
reference, token conservation, time accounting, preemption, KV pressure and invariants."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.batching import (
    CACHE_KINDS,
    BatchingConfig,
    BatchingModel,
    CacheKind,
    CapacityError,
    FinishedGeneration,
    GenerationJob,
    LruCache,
    decode_span_s,
    plan_chunk,
    steps_covering,
)
from heddle.policy.cost.model import AnalyticCostModel, preset
from heddle.policy.scheduling.preemption import PreemptionConfig

COST = preset("qwen3-32b", "h200", 1)


@dataclass(frozen=True, slots=True)
class SmallKv:
    """The calibrated model with a tiny KV cache, to exercise memory pressure."""

    inner: AnalyticCostModel
    max_kv_tokens: int

    @property
    def tp_degree(self) -> int:
        return self.inner.tp_degree

    def decode_step_s(self, batch_size: int, total_context_tokens: int) -> float:
        return self.inner.decode_step_s(batch_size, total_context_tokens)

    def prefill_s(self, num_tokens: int, num_cached_tokens: int = 0) -> float:
        return self.inner.prefill_s(num_tokens, num_cached_tokens)

    def interference(self, batch_size: int, mean_context_tokens: int = 0) -> float:
        return self.inner.interference(batch_size, mean_context_tokens)

    def solo_token_s(self, context_tokens: int = 0) -> float:
        return self.inner.solo_token_s(context_tokens)


def job(
    rid: str,
    ctx: int,
    out: int,
    *,
    new: int | None = None,
    prio: float = 0.0,
    traj: str | None = None,
) -> GenerationJob:
    """Request ``rid`` of trajectory ``traj`` (default ``t-<rid>``)."""
    return GenerationJob(
        request_id=rid,
        traj_id=f"t-{rid}" if traj is None else traj,
        num_context_tokens=ctx,
        num_new_tokens=ctx if new is None else new,
        num_output_tokens=out,
        priority=prio,
    )


def drain(model: BatchingModel) -> list[FinishedGeneration]:
    done: list[FinishedGeneration] = []
    while (at := model.next_event_time()) is not None:
        done += model.advance(at)
        assert model.invariant_violations() == []
    return done


# ---- decode spans ------------------------------------------------------------------------------


@settings(max_examples=150)
@given(
    model=st.sampled_from(["qwen3-8b", "qwen3-32b"]),
    tp=st.sampled_from([1, 2, 8]),
    batch=st.integers(1, 600),
    ctx=st.integers(0, 2_000_000),
    steps=st.integers(0, 400),
)
def test_decode_span_equals_step_by_step_sum(
    model: str, tp: int, batch: int, ctx: int, steps: int
) -> None:
    cost = preset(model, "h100", tp)
    brute = sum(cost.decode_step_s(batch, ctx + j * batch) for j in range(steps))
    assert decode_span_s(cost, batch, ctx, steps) == pytest.approx(brute, rel=1e-9, abs=1e-12)


@settings(max_examples=150)
@given(
    batch=st.integers(1, 600),
    ctx=st.integers(0, 500_000),
    max_steps=st.integers(1, 300),
    fraction=st.floats(0.0, 1.0),
)
def test_steps_covering_is_the_first_boundary_at_or_after(
    batch: int, ctx: int, max_steps: int, fraction: float
) -> None:
    duration = fraction * decode_span_s(COST, batch, ctx, max_steps)
    steps = steps_covering(COST, batch, ctx, duration, max_steps)
    assert 1 <= steps <= max_steps
    assert decode_span_s(COST, batch, ctx, steps) >= duration * (1 - 1e-12)
    if steps > 1:
        assert decode_span_s(COST, batch, ctx, steps - 1) < duration


@settings(max_examples=150)
@given(
    batch=st.integers(1, 600),
    ctx=st.integers(0, 1_000_000),
    steps=st.integers(1, 300),
    cut=st.floats(0.0, 1.0),
)
def test_a_chunk_prices_its_prefixes_like_the_step_by_step_sum(
    batch: int, ctx: int, steps: int, cut: float
) -> None:
    chunk = plan_chunk(COST, batch, ctx, steps)
    assert chunk.span_s == pytest.approx(decode_span_s(COST, batch, ctx, steps), rel=1e-9)
    if not chunk.is_linear:
        return
    prefix = max(1, round(cut * steps))
    brute = sum(COST.decode_step_s(batch, ctx + j * batch) for j in range(prefix))
    assert chunk.prefix_span_s(prefix) == pytest.approx(brute, rel=1e-9)
    duration = cut * chunk.span_s
    covering = chunk.steps_covering(duration)
    assert covering == steps_covering(COST, batch, ctx, duration, steps)


# ---- single jobs -------------------------------------------------------------------------------


def test_a_job_alone_takes_the_analytic_solo_time() -> None:
    model = BatchingModel(COST)
    model.submit(job("a", 1200, 700), 10.0)
    (done,) = drain(model)
    solo = COST.prefill_s(1200) + sum(COST.decode_step_s(1, 1200 + j) for j in range(700))
    assert done.finished_at - 10.0 == pytest.approx(solo, rel=1e-9)
    assert done.queue_s == 0.0
    assert done.prefill_s == pytest.approx(COST.prefill_s(1200))
    assert done.num_output_tokens == 700 and done.num_context_tokens == 1900


def test_next_turn_prefills_only_what_the_cache_lacks() -> None:
    model = BatchingModel(COST)
    model.submit(job("a", 1000, 100), 0.0)
    drain(model)
    turn = job("b", 1300, 50, new=200, traj="t-a")
    model.submit(turn, 100.0)
    (done,) = drain(model)
    assert done.num_cached_tokens == 1100 and done.num_recomputed_tokens == 0
    # The 200 new tokens attend to the 1,100 cached: more than a fresh 200-token prefill.
    assert done.prefill_s == pytest.approx(COST.prefill_s(200, 1100))
    assert done.prefill_s > COST.prefill_s(200)
    model.release("t-a")
    again = job("c", 1400, 10, new=50, traj="t-a")
    model.submit(again, 200.0)
    (lost,) = drain(model)
    assert lost.num_cached_tokens == 0 and lost.num_recomputed_tokens == 1350
    assert lost.prefill_s == pytest.approx(COST.prefill_s(1400))


@pytest.mark.parametrize("cache", ["trajectory", "radix"])
def test_new_weights_drop_the_cache_and_the_next_turn_recomputes_it(cache: str) -> None:
    model = BatchingModel(COST, BatchingConfig(cache=cache))  # type: ignore[arg-type]
    model.submit(job("a", 1000, 100), 0.0)
    with pytest.raises(ValueError, match="in flight"):
        model.invalidate_cache(0.0)
    drain(model)
    assert model.invalidate_cache(100.0) == 1100
    assert model.load().num_kv_tokens == 0 and model.cached_tokens("t-a") == 0
    turn = job("b", 1300, 50, new=200, traj="t-a")
    model.submit(turn, 100.0)
    (done,) = drain(model)
    assert done.num_cached_tokens == 0 and done.num_recomputed_tokens == 1100
    assert done.prefill_s == pytest.approx(COST.prefill_s(1300))


def test_a_job_that_can_never_fit_is_refused() -> None:
    model = BatchingModel(SmallKv(COST, 1000))
    with pytest.raises(CapacityError, match="exceeds the KV capacity"):
        model.submit(job("a", 900, 200), 0.0)
    with pytest.raises(ValueError, match="token counts"):
        job("b", -1, 3)


def test_one_generation_per_trajectory_at_a_time() -> None:
    model = BatchingModel(COST)
    model.submit(job("a", 10, 10), 0.0)
    with pytest.raises(ValueError, match="already has a generation"):
        model.submit(
            job("b", 5, 1, new=5, traj="t-a"),
            0.0,
        )


# ---- scheduling --------------------------------------------------------------------------------


def test_priority_orders_admission_and_preemption_keeps_kv() -> None:
    model = BatchingModel(COST, BatchingConfig(max_running=1, preemptive=True))
    model.submit(job("low", 1000, 400, prio=1.0), 0.0)
    model.submit(job("mid", 1000, 100, prio=2.0), 0.5)
    done = {d.request_id: d for d in drain(model)}
    assert done["mid"].finished_at < done["low"].finished_at
    assert done["low"].num_preemptions == 1
    assert done["low"].num_recomputed_tokens == 0  # resumed from its kept KV
    assert done["low"].num_output_tokens == 400
    assert done["mid"].queue_s < COST.decode_step_s(1, 1400)  # only the step in flight


def test_no_preemption_without_the_flag_or_below_the_threshold() -> None:
    for config in (
        BatchingConfig(max_running=1),
        BatchingConfig(
            max_running=1, preemptive=True, preemption=PreemptionConfig(min_priority_gap=5.0)
        ),
    ):
        model = BatchingModel(COST, config)
        model.submit(job("low", 100, 300, prio=1.0), 0.0)
        model.submit(job("high", 100, 10, prio=2.0), 0.1)
        done = {d.request_id: d for d in drain(model)}
        assert done["high"].finished_at > done["low"].finished_at
        assert done["low"].num_preemptions == 0


def test_kv_pressure_evicts_idle_prefixes_and_counts_recompute() -> None:
    model = BatchingModel(SmallKv(COST, 3000))
    model.submit(job("a", 1000, 100), 0.0)
    drain(model)  # t-a now caches 1100 tokens
    model.submit(job("b", 1500, 300), 10.0)  # grows to 1800 live tokens: 2900 with t-a's cache
    model.submit(job("c", 500, 10), 10.0)  # cannot run beside b (2900 > 3000 - ...): waits
    drain(model)
    assert model.num_evicted_tokens >= 1100
    model.submit(
        job("a2", 1200, 5, new=100, traj="t-a"),
        50.0,
    )
    (again,) = drain(model)
    assert again.num_recomputed_tokens == 1100


def test_set_priority_reorders_the_waiting_queue() -> None:
    model = BatchingModel(COST, BatchingConfig(max_running=1))
    model.submit(job("run", 100, 50), 0.0)
    model.submit(job("first", 100, 50), 0.01)
    model.submit(job("second", 100, 50), 0.01)
    assert model.set_priority("second", 3.0, 0.01)
    order = [d.request_id for d in drain(model)]
    assert order == ["run", "second", "first"]
    assert not model.set_priority("gone", 1.0, 100.0)


def test_abort_returns_partial_tokens_and_frees_the_slot() -> None:
    model = BatchingModel(COST, BatchingConfig(max_running=1))
    model.submit(job("a", 100, 10_000), 0.0)
    model.submit(job("b", 100, 10), 0.0)
    generated = model.abort("a", 1.0)
    assert 0 < generated < 10_000
    (done,) = drain(model)
    assert done.request_id == "b" and model.abort("a", 2.0) == -1


@given(
    stop_at=st.floats(0.0, 30.0),
    outputs=st.lists(st.integers(1, 3000), min_size=1, max_size=6),
    max_running=st.integers(1, 4),
)
def test_a_stop_reports_what_finished_and_interrupts_the_rest_with_its_time(
    stop_at: float, outputs: list[int], max_running: int
) -> None:
    """Nothing stays in flight; a finished job had all its tokens, an interrupted one fewer;
    each result's time is queue + prefill + decode up to the stop."""
    model = BatchingModel(COST, BatchingConfig(max_running=max_running))
    for index, num_output in enumerate(outputs):
        model.submit(job(f"r{index}", 500, num_output), 0.0)
    done: list[FinishedGeneration] = []
    while (at := model.next_event_time()) is not None and at < stop_at:
        done += model.advance(at)
    finished, interrupted = model.stop(stop_at)
    assert model.next_event_time() is None and model.load().num_running == 0
    assert model.invariant_violations() == []
    target = {f"r{index}": n for index, n in enumerate(outputs)}
    assert sorted(r.request_id for r in done + finished + interrupted) == sorted(target)
    for result in done + finished:
        assert result.num_output_tokens == target[result.request_id]
    for result in interrupted:
        assert result.num_output_tokens < target[result.request_id]
        assert result.finished_at >= stop_at
    for result in done + finished + interrupted:
        spent = result.queue_s + result.prefill_s + result.decode_s
        assert spent == pytest.approx(result.finished_at - result.submitted_at, abs=1e-9)


# ---- a token-by-token reference ----------------------------------------------------------------


@dataclass
class RefJob:
    job: GenerationJob
    arrival: int
    submitted: float
    generated: int = 0
    finished: float = math.nan


@dataclass
class Reference:
    """Step-by-step continuous batching with the model's semantics (no KV pressure, no
    preemption): admissions at step boundaries, one prefill batch stalls decoding."""

    max_running: int
    clock: float = 0.0
    running: list[RefJob] = field(default_factory=list)
    waiting: list[RefJob] = field(default_factory=list)

    def run(self, arrivals: list[tuple[float, GenerationJob]]) -> dict[str, float]:
        pending = sorted(arrivals, key=lambda item: item[0])  # stable: ties keep list order
        jobs = [RefJob(job, arrival, at) for arrival, (at, job) in enumerate(pending)]
        result: dict[str, float] = {}
        cursor = 0
        while cursor < len(jobs) or self.running or self.waiting:
            self._finish(result)
            if not self.running and not self.waiting and cursor < len(jobs):
                self.clock = max(self.clock, jobs[cursor].submitted)
            while cursor < len(jobs) and jobs[cursor].submitted <= self.clock:
                self.waiting.append(jobs[cursor])
                cursor += 1
            if self._admit():
                continue  # the end of a prefill is a boundary: new arrivals may join
            if self.running:
                self._step()
        return result

    def _admit(self) -> bool:
        self.waiting.sort(key=lambda ref: (-ref.job.priority, ref.arrival))
        admitted = []
        while self.waiting and len(self.running) + len(admitted) < self.max_running:
            admitted.append(self.waiting.pop(0))
        self.running += admitted
        self.clock += sum(COST.prefill_s(ref.job.num_context_tokens) for ref in admitted)
        return bool(admitted)

    def _finish(self, result: dict[str, float]) -> None:
        for ref in [ref for ref in self.running if ref.generated == ref.job.num_output_tokens]:
            result[ref.job.request_id] = self.clock
            self.running.remove(ref)

    def _step(self) -> None:
        context = sum(ref.job.num_context_tokens + ref.generated for ref in self.running)
        self.clock += COST.decode_step_s(len(self.running), context)
        for ref in self.running:
            ref.generated += 1


arrival_lists = st.lists(
    st.tuples(
        st.floats(0.0, 3.0),
        st.integers(1, 2000),
        st.integers(0, 60),
        st.sampled_from([0.0, 1.0, 2.0]),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=120)
@given(arrivals=arrival_lists, max_running=st.integers(1, 4))
def test_chunked_model_matches_the_token_by_token_reference(
    arrivals: list[tuple[float, int, int, float]], max_running: int
) -> None:
    jobs = [
        (at, job(f"r{i}", ctx, out, prio=prio)) for i, (at, ctx, out, prio) in enumerate(arrivals)
    ]
    expected = Reference(max_running).run(jobs)
    model = BatchingModel(COST, BatchingConfig(max_running=max_running))
    done: dict[str, float] = {}
    for at, item in sorted(jobs, key=lambda pair: pair[0]):
        for finished in model.advance(at):
            done[finished.request_id] = finished.finished_at
        model.submit(item, at)
    for finished in drain(model):
        done[finished.request_id] = finished.finished_at
    assert done.keys() == expected.keys()
    for rid, at in expected.items():
        assert done[rid] == pytest.approx(at, rel=1e-9, abs=1e-9), rid


# ---- invariants under random operations --------------------------------------------------------

PROMPT_TOKENS = 100
"""The group prompt of t0..t3 (t0, t2 in g0; t1, t3 in g1)."""

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"),
            st.integers(0, 5),
            st.integers(0, 900),
            st.integers(0, 400),
            st.integers(0, 3),
        ),
        st.tuples(st.just("priority"), st.integers(0, 30), st.integers(0, 3)),
        st.tuples(st.just("preempt"), st.integers(0, 30)),
        st.tuples(st.just("abort"), st.integers(0, 30)),
        st.tuples(st.just("release"), st.integers(0, 5)),
        st.tuples(st.just("advance"), st.floats(0.0, 5.0)),
    ),
    max_size=40,
)


@settings(max_examples=200)
@given(
    ops=operations,
    capacity=st.integers(1500, 6000),
    max_running=st.integers(1, 4),
    preemptive=st.booleans(),
    cache=st.sampled_from(CACHE_KINDS),
    keeps_kv=st.booleans(),
    page_tokens=st.sampled_from([1, 1, 16]),
)
def test_invariants_and_conservation_under_random_operations(
    ops: list[tuple],
    capacity: int,
    max_running: int,
    preemptive: bool,
    cache: CacheKind,
    keeps_kv: bool,
    page_tokens: int,
) -> None:
    config = BatchingConfig(
        max_running=max_running,
        preemptive=preemptive,
        cache=cache,
        preemption_keeps_kv=keeps_kv,
        page_tokens=page_tokens,
    )
    model = BatchingModel(SmallKv(COST, capacity), config)
    now = 0.0
    targets: dict[str, int] = {}
    contexts: dict[str, int] = {}
    aborted: set[str] = set()
    done: list[FinishedGeneration] = []
    for op in ops:
        match op:
            case ("submit", traj, ctx, out, prio):
                rid = f"r{len(targets)}"
                tid = f"t{traj}"
                total = max(ctx, contexts.get(tid, 0), PROMPT_TOKENS)
                item = GenerationJob(
                    request_id=rid,
                    traj_id=tid,
                    num_context_tokens=total,
                    num_new_tokens=total - contexts.get(tid, 0),
                    num_output_tokens=out,
                    priority=float(prio),
                    group_id=f"g{traj % 2}" if traj < 4 else "",  # t4, t5: no group
                    num_prompt_tokens=PROMPT_TOKENS if traj < 4 else 0,
                )
                try:
                    model.submit(item, now)
                except CapacityError:
                    continue
                except ValueError:
                    continue  # that trajectory already has a generation in flight
                targets[rid] = out
            case ("priority", index, prio):
                model.set_priority(f"r{index}", float(prio), now)
            case ("preempt", index):
                model.preempt(f"r{index}", now)
            case ("abort", index):
                if model.abort(f"r{index}", now) >= 0:
                    aborted.add(f"r{index}")
            case ("release", traj):
                model.release(f"t{traj}")
            case ("advance", delta):
                now += delta
                done += model.advance(now)
        assert model.invariant_violations() == []
        for finished in done:
            contexts[finished.traj_id] = finished.num_context_tokens
    done += drain(model)
    assert {d.request_id for d in done} == set(targets) - aborted
    previous = -math.inf
    for finished in done:
        assert finished.num_output_tokens == targets[finished.request_id]
        spent = finished.queue_s + finished.prefill_s + finished.decode_s
        assert spent == pytest.approx(finished.finished_at - finished.submitted_at, abs=1e-6)
        assert min(finished.queue_s, finished.prefill_s, finished.decode_s) >= -1e-9
        assert finished.finished_at >= previous
        previous = finished.finished_at
    assert model.load().num_running == 0 and model.load().num_waiting == 0


# ---- prefix caches -----------------------------------------------------------------------------


def test_lru_cache_evicts_the_least_recently_used() -> None:
    cache = LruCache()
    cache.put("a", "", 0, 10)
    cache.put("b", "", 0, 20)
    cache.put("a", "", 0, 11)  # touched again
    assert cache.evict_one() == 20 and cache.records() == {"a": 11}
    assert cache.take("a", "g", 5) == 11 and cache.total_tokens == 0
    assert cache.evict_one() == 0 and cache.locked_tokens == 0
