"""The simulated training loop (``heddle.experiments.async_steps``): stop-the-world is S sequential
rollouts plus S trainer times, partial rollout overlaps them within the staleness bound, and
weight loads pause the workers and drop their caches (``heddle.sim.weight_loads``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_traces import traces as sim_traces
from sim_traces import trajectory

from heddle.control.systems import system_spec
from heddle.events import Completed, Failed, Generated, Migrated, WeightsLoaded
from heddle.experiments.async_steps import LoopReport, TrainerTime, simulate_loop
from heddle.sim import SimConfig, simulate
from heddle.sim.run import control_for
from heddle.sim.simulator import Run, Simulator
from heddle.sim.weight_loads import WeightPlan
from heddle.traces import TraceTrajectory
from heddle.workloads import generate

MODEL = "qwen3-8b"
INSTANT = {"control_latency_p50_ms": 0.0, "control_latency_p99_ms": 0.0}
"""Commands arrive when sent: the loop's arithmetic below is exact only then (with latency, a
rollout's starts queue behind the weight commands sent just before them, which shifts its
batches by a few ms)."""


def epochs(
    num_steps: int, num: int = 24
) -> tuple[list[list[TraceTrajectory]], list[list[TraceTrajectory]]]:
    traces = [generate("coding", num, 3, epoch=step) for step in range(num_steps)]
    return traces, [generate("coding", num, 3, epoch=1), *traces[:-1]]


def check_schedule(loop: LoopReport) -> None:
    """The loop's times follow the schedule's recurrence, recomputed from the rollouts'
    makespans alone (the reference)."""
    published: dict[int, float] = {}
    rollout_end = train_end = 0.0
    k = loop.max_staleness
    for step in loop.steps:
        makespan = step.rollout_end_s - step.rollout_start_s
        j = step.step
        start = max(rollout_end, published.get(j - k, 0.0)) if j else 0.0
        assert step.rollout_start_s == pytest.approx(start, abs=1e-6)
        rollout_end = start + makespan
        train_start = max(rollout_end, train_end)
        train_end = train_start + loop.trainer_s
        published[j + 1] = train_end
        assert step.train_start_s == pytest.approx(train_start, abs=1e-6)
        assert step.train_end_s == pytest.approx(train_end, abs=1e-6)


@pytest.mark.parametrize("system", ["heddle", "verl"])
def test_stop_the_world_is_sequential_rollouts_plus_trainer_times(system: str) -> None:
    traces, histories = epochs(3)
    config = SimConfig(model=MODEL, num_gpus=4, weight_load_s=0.0, **INSTANT)
    loop = simulate_loop(traces, histories, system, config, 0, TrainerTime(seconds=300.0))
    _, tp = control_for(traces[0], system_spec(system), config, histories[0])
    rollouts = [
        simulate(trace, system, config, history=history, tp_degrees=tp).makespan_s
        for trace, history in zip(traces, histories, strict=True)
    ]
    assert loop.total_s == pytest.approx(sum(rollouts) + 3 * 300.0, rel=1e-9)
    for step, makespan in zip(loop.steps, rollouts, strict=True):
        assert step.rollout_end_s - step.rollout_start_s == pytest.approx(makespan, rel=1e-9)
        assert step.oldest_version == step.step  # every batch ran on the weights trained so far
        assert step.max_staleness == step.max_versions_spanned == 0
        assert step.num_completed == len(traces[0])


def test_stop_the_world_charges_a_weight_load_before_each_later_rollout() -> None:
    traces, histories = epochs(3)
    free = SimConfig(model=MODEL, num_gpus=4, weight_load_s=0.0, **INSTANT)
    paid = SimConfig(model=MODEL, num_gpus=4, weight_load_s=40.0, **INSTANT)
    trainer = TrainerTime(seconds=100.0)
    without = simulate_loop(traces, histories, "heddle", free, 0, trainer)
    with_loads = simulate_loop(traces, histories, "heddle", paid, 0, trainer)
    num_workers = len(control_for(traces[0], system_spec("heddle"), paid, histories[0])[1])
    summary = with_loads.summary()
    assert summary["num_weight_loads"] == 2 * num_workers  # v1 and v2, on every worker
    assert summary["weight_load_s"] == pytest.approx(2 * num_workers * 40.0)
    assert summary["drain_s"] == 0.0  # idle workers swap at once
    # The workers all swap at the rollout's start: the rollout runs 40 s later.
    assert with_loads.total_s == pytest.approx(without.total_s + 2 * 40.0, rel=1e-9)


def test_partial_rollout_overlaps_training_and_pays_for_its_swaps() -> None:
    traces, histories = epochs(3, num=48)
    config = SimConfig(model=MODEL, num_gpus=4, weight_load_s=5.0)
    trainer = TrainerTime(fraction=0.5)
    stop = simulate_loop(traces, histories, "heddle", config, 0, trainer)
    partial = simulate_loop(traces, histories, "heddle", config, 1, trainer)
    check_schedule(stop)
    check_schedule(partial)
    assert partial.trainer_s == stop.trainer_s  # both resolve on the same first rollout
    assert partial.trajectories_per_hour > stop.trajectories_per_hour
    later = partial.steps[1:]
    assert all(
        s.rollout_start_s < s.rollout_end_s and s.oldest_version == s.step - 1 for s in later
    )
    assert all(s.max_staleness == 1 for s in later)
    # The version lands mid-rollout: the workers drain and swap, the caches go and re-prefill.
    assert all(s.num_weight_loads >= 1 and s.num_invalidated_tokens > 0 for s in later)
    assert sum(s.num_recomputed_tokens for s in later) > sum(
        s.num_recomputed_tokens for s in stop.steps[1:]
    )


traces = sim_traces(
    prompt=(1, 2000), output=(1, 300), tool_s=20.0, observation=(0, 200), max_steps=4,
    max_trajectories=8,
)  # fmt: skip


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(
    trace=traces,
    num_steps=st.integers(1, 4),
    bound=st.integers(0, 3),
    fraction=st.floats(0.0, 3.0),
    load_s=st.floats(0.0, 30.0),
    system=st.sampled_from(["heddle", "verl", "slime-least-inflight"]),
)
def test_the_staleness_bound_is_never_broken(
    trace: list[TraceTrajectory],
    num_steps: int,
    bound: int,
    fraction: float,
    load_s: float,
    system: str,
) -> None:
    config = SimConfig(model=MODEL, num_gpus=2, predictor="oracle", weight_load_s=load_s)
    loop = simulate_loop(
        [trace] * num_steps,
        [trace] * num_steps,
        system,
        config,
        bound,
        TrainerTime(fraction=fraction),
    )
    check_schedule(loop)
    summary = loop.summary()
    assert summary["num_stale"] == summary["num_failed"] == 0
    assert summary["num_completed"] == num_steps * len(trace)
    assert summary["max_staleness_seen"] <= bound
    assert summary["max_versions_spanned"] <= bound
    for step in loop.steps:
        assert step.oldest_version >= step.step - bound


def run_with_publications(
    trace: Sequence[TraceTrajectory],
    publications: tuple[tuple[float, int], ...],
    load_s: float,
    max_staleness: int | None = None,
) -> Run:
    config = SimConfig(model=MODEL, num_gpus=2, weight_load_s=load_s, record_events=True)
    control, tp = control_for(trace, system_spec("verl"), config)
    plan = WeightPlan(publications=publications, max_staleness=max_staleness)
    return Simulator(trace, control, tp, config, plan).run()


def long_trace(num: int = 6) -> list[TraceTrajectory]:
    """Trajectories whose first generation runs past 2 s and whose last ends after 100 s."""
    return [trajectory(f"t{i}", 500, [(1000, 20.0, 100)] * 6) for i in range(num)]


def test_a_version_published_mid_rollout_pauses_each_worker_and_tags_later_tokens() -> None:
    run = run_with_publications(long_trace(), ((2.0, 1),), load_s=10.0)  # mid-generation
    loads = [e for e in run.events if isinstance(e, WeightsLoaded)]
    assert {e.worker_id for e in loads} == set(run.weights.workers)
    for weights in run.weights.workers.values():
        assert weights.version == 1 and weights.num_loads == 1
        assert weights.load_s == pytest.approx(10.0)
    loaded_at = {e.worker_id: e.occurred_at for e in loads}
    for event in run.events:
        if isinstance(event, Generated):
            started = event.occurred_at - event.queue_s - event.prefill_s - event.decode_s
            if started >= loaded_at[event.worker_id] - 1e-9:
                assert event.weight_version == 1
            else:  # no generation runs across the swap: the old ones end before it starts
                assert event.weight_version == 0
                assert event.occurred_at <= loaded_at[event.worker_id] - 10.0 + 1e-9
        if isinstance(event, Completed):
            assert event.weight_versions == [0, 1]  # every trajectory outlived the swap
    assert all(load >= 2.0 + 10.0 for load in loaded_at.values())


def test_a_long_load_delays_every_unfinished_trajectory() -> None:
    quick = run_with_publications(long_trace(), ((30.0, 1),), load_s=0.0)
    slow = run_with_publications(long_trace(), ((30.0, 1),), load_s=5000.0)
    assert slow.makespan_s >= 30.0 + 5000.0
    assert quick.makespan_s < 5000.0


def test_a_trajectory_that_would_span_too_many_versions_fails_as_stale() -> None:
    run = run_with_publications(long_trace(), ((30.0, 1), (60.0, 2)), load_s=1.0, max_staleness=1)
    failed = [e for e in run.events if isinstance(e, Failed)]
    assert failed and all("stale: weights 0..2" in e.reason for e in failed)
    assert run.weights.num_stale == len(failed)
    for event in run.events:
        if isinstance(event, Completed):
            assert event.weight_versions[-1] - event.weight_versions[0] <= 1


def test_a_version_commanded_during_a_swap_is_loaded_right_after_it() -> None:
    trace = long_trace(2)
    config = SimConfig(model=MODEL, num_gpus=2, weight_load_s=3.0, record_events=True)
    control, tp = control_for(trace, system_spec("verl"), config)
    loading = {f"w{index:02d}": (1, 5.0) for index in range(len(tp))}  # carried into the rollout
    plan = WeightPlan(loading=loading, publications=((1.0, 2),))
    run = Simulator(trace, control, tp, config, plan).run()
    loads = [
        (e.worker_id, e.weight_version, e.occurred_at)
        for e in run.events
        if isinstance(e, WeightsLoaded)
    ]
    assert sorted(loads) == sorted((w, v, at) for w in loading for v, at in ((1, 5.0), (2, 8.0)))
    completed = [e for e in run.events if isinstance(e, Completed)]
    assert len(completed) == 2 and all(e.weight_versions == [2] for e in completed)


def test_a_rollout_that_ends_mid_swap_hands_the_next_swap_on() -> None:
    """One trajectory on two TP1 workers: the other one is still swapping to version 1, with 2
    commanded, when the rollout ends; ``settle`` chains the second swap after the first."""
    trace = long_trace(1)
    config = SimConfig(
        model=MODEL,
        num_gpus=2,
        weight_load_s=4.0,
        predictor="oracle",
        **INSTANT,  # the load is commanded at the publication, 1.0 s
    )
    control, tp = control_for(trace, system_spec("fix-1"), config)
    assert tp == [1, 1]
    plan = WeightPlan(loading={"w01": (1, 1000.0)}, publications=((1.0, 2),))
    run = Simulator(trace, control, tp, config, plan).run()
    assert run.makespan_s < 1000.0  # the trajectory ran on w00, which swapped to 2 on the way
    serving, busy = run.weights.workers["w00"], run.weights.workers["w01"]
    assert serving.version == 2 and serving.loading_version is None
    assert busy.pending is not None and busy.loading_version == 1
    run.weights.settle(run.makespan_s)
    assert busy.pending is None and busy.loading_version == 2
    assert busy.ready_at == pytest.approx(1000.0 + 4.0) and busy.num_loads == 1
    assert busy.drain_s == pytest.approx(1000.0 - 1.0)


def test_kv_computed_under_older_weights_never_moves() -> None:
    """Heddle on the engine model whose migrations move KV, two versions published mid-rollout:
    a trajectory that last generated on weights older than the latest moves without its KV
    (the placement decider marks the request stale), every other move takes it along."""
    trace = generate("math", 64, seed=1)
    config = SimConfig(model=MODEL, num_gpus=4, engine_model="torch", record_events=True)
    control, tp = control_for(trace, system_spec("heddle"), config)
    publications = ((30.0, 1), (60.0, 2))
    run = Simulator(trace, control, tp, config, WeightPlan(publications=publications)).run()
    last_version: dict[str, int] = {}
    moves = {True: 0, False: 0}
    for event in run.events:
        if isinstance(event, Generated):
            last_version[event.traj_id] = event.weight_version
        if isinstance(event, Migrated):
            latest = max((v for at, v in publications if at < event.occurred_at), default=0)
            is_stale = last_version.get(event.traj_id, 0) < latest
            assert event.kv_transferred is not is_stale
            moves[is_stale] += 1
    assert moves[True] and moves[False]  # both kinds happen in this rollout
    assert all(run.weights.accepts_kv(w, 2) for w in run.weights.workers)
    assert not any(run.weights.accepts_kv(w, 1) for w in run.weights.workers)
