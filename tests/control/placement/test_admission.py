"""KV admission: budgets are kept, held trajectories start in priority order and only where they
fit, nothing starts twice, and the placement decider starts the rest as room appears."""

from __future__ import annotations

import math

import events_factory as b
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from heddle.control.placement import (
    MAX_PROJECTION_POINTS,
    AdmissionConfig,
    Footprint,
    KvAdmission,
    KvAdmissionGate,
    PlacementDecider,
    PresortedPlacer,
    projected_peak,
)
from heddle.events import StartTrajectory, TrajectoryPlaced
from heddle.policy.cost.model import AnalyticCostModel, preset
from heddle.policy.scheduling.priority import priority_policy

operations = st.lists(
    st.one_of(
        st.tuples(st.just("hold"), st.integers(0, 30), st.floats(0, 100), st.integers(1, 400)),
        st.tuples(st.just("update"), st.integers(0, 30), st.integers(1, 400)),
        st.tuples(st.just("release"), st.integers(0, 30)),
        st.tuples(st.just("reprioritize"), st.integers(0, 30), st.floats(0, 100)),
        st.tuples(st.just("admit"), st.integers(1, 3)),
    ),
    max_size=80,
)


@settings(max_examples=150)
@given(
    ops=operations,
    capacities=st.lists(st.integers(0, 800), min_size=1, max_size=3),
    late=st.booleans(),
)
def test_admission_keeps_budgets_and_priority_order(
    ops: list[tuple[object, ...]], capacities: list[int], late: bool
) -> None:
    config = AdmissionConfig(overcommit=1.0, late_binding=late)
    admission = KvAdmission(config)
    workers = [f"w{i}" for i in range(len(capacities))]
    for worker, capacity in zip(workers, capacities, strict=True):
        admission.add_worker(worker, capacity)
    held: dict[tuple[str, str], tuple[float, int, float]] = {}  # priority, order, footprint
    placed: dict[tuple[str, str], tuple[str, float]] = {}
    order = 0
    for op in ops:
        match op:
            case ("hold", int(i), float(priority), int(size)):
                key = ("r", f"t{i}")
                if key not in held and key not in placed:
                    order += 1
                    held[key] = (priority, order, float(size))
                admission.hold(key, priority, Footprint.flat(size), workers[i % len(workers)])
            case ("update", int(i), int(size)):
                key = ("r", f"t{i}")
                admission.update(key, Footprint.flat(size))
                if key in held:
                    held[key] = (held[key][0], held[key][1], float(size))
                elif key in placed:
                    placed[key] = (placed[key][0], float(size))
            case ("release", int(i)):
                key = ("r", f"t{i}")
                admission.release(key)
                held.pop(key, None)
                placed.pop(key, None)
            case ("reprioritize", int(i), float(priority)):
                key = ("r", f"t{i}")
                admission.reprioritize(key, priority)
                if key in held:
                    held[key] = (priority, held[key][1], held[key][2])
            case ("admit", int(num_live)):
                live = workers[:num_live]
                loads = {w: sum(f for v, f in placed.values() if v == w) for w in workers}
                residents = {w: sum(1 for v, _ in placed.values() if v == w) for w in workers}
                started = admission.admit(live)
                expected_order = sorted(held, key=lambda k: (-held[k][0], held[k][1]))
                assert [key for key, _ in started] == expected_order[: len(started)]
                for key, worker in started:
                    assert worker in live
                    footprint = held.pop(key)[2]
                    budget = capacities[workers.index(worker)]
                    assert (
                        residents[worker] == 0
                        or budget == 0
                        or (loads[worker] + footprint <= budget + 1e-9)
                    )
                    loads[worker] += footprint
                    residents[worker] += 1
                    placed[key] = (worker, footprint)
                if held and live:
                    head = expected_order[len(started)]
                    planned = workers[int(head[1][1:]) % len(workers)]
                    may_go = live if late or planned not in live else [planned]
                    assert not any(
                        residents[w] == 0
                        or capacities[workers.index(w)] == 0
                        or loads[w] + held[head][2] <= capacities[workers.index(w)]
                        for w in may_go
                    ), "a held head that fits was left waiting"
    assert all(admission.is_held(key) for key in held)
    assert not any(admission.is_held(key) for key in placed)


def cost_for_tp(tp: int) -> AnalyticCostModel:
    return preset("qwen3-32b", "h200", tp)


def test_the_decider_starts_held_trajectories_as_room_appears() -> None:
    """Two workers that each hold about one 500k-token peak: the longest predicted start first,
    one per worker; each completion lets the next longest in; everyone starts once."""
    gate = KvAdmissionGate(AdmissionConfig(overcommit=1.0), priority_policy("pps"))
    decider = PlacementDecider(lambda: PresortedPlacer(cost_for_tp, hysteresis=0.0), admission=gate)
    outputs: list[object] = []
    for worker in ("w0", "w1"):
        outputs += decider.decide(replace(b.worker(worker, 1), max_kv_tokens=600_000))
    outputs += decider.decide(b.rollout(5))
    lengths = [100_000.0, 200_000.0, 300_000.0, 400_000.0, 250_000.0]
    for i in range(len(lengths)):
        outputs += decider.decide(b.submitted(f"t{i}", i))
    for i, n in enumerate(lengths):
        outputs += decider.decide(b.predicted(f"t{i}", -1, n))
    started = [o.traj_id for o in outputs if isinstance(o, StartTrajectory)]
    assert started == ["t3", "t2"]  # peaks of 400k and 300k tokens (growth 2x: 800k, 600k)
    assert {o.worker_id for o in outputs if isinstance(o, TrajectoryPlaced)} == {"w0", "w1"}
    order = []
    for done in ("t3", "t2", "t4", "t1", "t0"):
        outputs = decider.decide(b.completed(done, 1, 5))
        order += [o.traj_id for o in outputs if isinstance(o, StartTrajectory)]
    assert order == ["t4", "t1", "t0"]


footprints = st.lists(
    st.builds(
        Footprint,
        st.floats(0, 1000),
        st.floats(0, 1000),
        st.one_of(st.just(math.inf), st.floats(0.01, 100)),
    ),
    min_size=1,
    max_size=MAX_PROJECTION_POINTS - 1,
)


def _held_at(footprints: list[Footprint], time_s: float) -> float:
    """Brute force: the KV the footprints hold at ``time_s`` (each present while before its end)."""
    total = 0.0
    for f in footprints:
        if time_s < f.duration_s:
            total += f.context_tokens + f.growth_tokens * min(time_s / f.duration_s, 1.0)
    return total


@settings(max_examples=200)
@given(footprints=footprints)
def test_the_projected_peak_is_the_most_held_at_any_time(footprints: list[Footprint]) -> None:
    """Against a dense scan of time (just before each departure, and between): the projection
    finds the maximum (every footprint grows until it leaves, so the maximum is at a departure)."""
    ends = sorted({f.duration_s for f in footprints if math.isfinite(f.duration_s)})
    times = [0.0] + [end * (1 - 1e-9) for end in ends] + [end * 0.5 for end in ends]
    brute = max(_held_at(footprints, t) for t in times)
    assert math.isclose(projected_peak(footprints), brute, rel_tol=1e-6, abs_tol=1e-6)
    assert projected_peak(footprints) <= sum(f.peak_tokens for f in footprints) + 1e-6


@settings(max_examples=100)
@given(footprints=footprints, budget=st.integers(1, 3000))
def test_projected_admission_keeps_the_projected_budget(
    footprints: list[Footprint], budget: int
) -> None:
    """Under projection a worker admits beyond its summed peaks, but never past its budget at
    any projected instant (a first resident always starts)."""
    admission = KvAdmission(AdmissionConfig(overcommit=1.0, projection=True))
    admission.add_worker("w0", budget)
    for i, footprint in enumerate(footprints):
        admission.hold(("r", f"t{i}"), float(-i), footprint, "w0")
    started = [key for key, _ in admission.admit(["w0"])]
    admitted = [footprints[int(key[1][1:])] for key in started]
    assert started == [("r", f"t{i}") for i in range(len(started))]  # priority order
    assert len(admitted) == 1 or projected_peak(admitted) <= budget + 1e-6


def _footprint_of(gate: KvAdmissionGate, key: tuple[str, str]) -> Footprint:
    gate.hold(key, "w0", remaining_tool_s=900.0)
    return gate.admission._held[key].footprint


def test_long_tool_calls_count_a_trajectory_by_its_duty_cycle() -> None:
    """With calls over ``retention_s`` (known from history, then from the rollout's own calls),
    a trajectory that spends most of its time in tools counts that share of its KV only; with
    short calls it counts whole."""
    config = AdmissionConfig(retention_s=10.0)
    long_calls = KvAdmissionGate(config, priority_policy("pps"), prior_tool_call_s=60.0)
    short_calls = KvAdmissionGate(config, priority_policy("pps"), prior_tool_call_s=2.0)
    for gate in (long_calls, short_calls):
        gate.track(("r", "t0"), 0.0, 0, 1000, 4000.0)
    duty = _footprint_of(long_calls, ("r", "t0"))
    whole = _footprint_of(short_calls, ("r", "t0"))
    assert whole.context_tokens == 1000.0
    assert duty.context_tokens < 0.2 * whole.context_tokens  # 100 s of decode, 900 s of tools
    assert duty.duration_s == whole.duration_s
    short_calls.track(("r", "t1"), 0.0, 1, 1000, 4000.0)
    for _ in range(3):
        short_calls.tool_returned(("r", "t1"), 120.0)  # its own calls override the prior
    assert _footprint_of(short_calls, ("r", "t1")).context_tokens < 0.2 * whole.context_tokens


projected_operations = st.lists(
    st.one_of(
        st.tuples(st.just("hold"), st.integers(0, 12), st.integers(1, 300), st.integers(1, 50)),
        st.tuples(st.just("update"), st.integers(0, 12), st.integers(1, 300), st.integers(1, 50)),
        st.tuples(st.just("release"), st.integers(0, 12)),
        st.tuples(st.just("admit"), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300)
@given(ops=projected_operations, budgets=st.lists(st.integers(50, 600), min_size=1, max_size=3))
def test_remembered_fits_answer_as_a_fresh_projection_does(
    ops: list[tuple[object, ...]], budgets: list[int]
) -> None:
    """A worker remembers its ``fits`` answers until its residents change: after any sequence
    of holds, updates, releases and admissions, every worker answers for every held footprint
    what a projection of its residents computed now answers."""
    admission = KvAdmission(AdmissionConfig(overcommit=1.0, projection=True))
    workers = [f"w{i}" for i in range(len(budgets))]
    for worker, budget in zip(workers, budgets, strict=True):
        admission.add_worker(worker, budget)
    for op in ops:
        match op:
            case ("hold", int(i), int(size), int(duration)):
                footprint = Footprint(size / 2, size / 2, float(duration))
                admission.hold(("r", f"t{i}"), float(i), footprint, workers[i % len(workers)])
            case ("update", int(i), int(size), int(duration)):
                admission.update(("r", f"t{i}"), Footprint(size / 2, size / 2, float(duration)))
            case ("release", int(i)):
                admission.release(("r", f"t{i}"))
            case _:
                admission.admit(workers)
        for state in admission._workers.values():
            residents = list(state.residents.values())
            for held in admission._held.values():
                fresh = (
                    not residents
                    or held.footprint.peak_tokens <= state.room()
                    or projected_peak([*residents, held.footprint]) <= state.budget
                )
                assert state.fits(held.footprint) == fresh
            assert math.isclose(state.load, sum(f.peak_tokens for f in residents), abs_tol=1e-6)


def test_a_resident_that_grows_withdraws_a_remembered_fit() -> None:
    """Budget 100. Resident ``a`` peaks at 60 after 10 s; ``f`` peaks at 50 and leaves after 5 s:
    their peaks sum to 110, but together they never hold more than 95 (at 5 s), so ``f`` fits.
    Once ``a``'s estimate grows by 10 tokens they would hold 105 at 5 s: ``f`` no longer fits,
    whatever the worker answered before."""
    admission = KvAdmission(AdmissionConfig(overcommit=1.0, projection=True))
    admission.add_worker("w0", 100)
    a, f = ("r", "a"), ("r", "f")
    admission.hold(a, 2.0, Footprint(30, 30, 10.0), "w0")
    assert [x.key for x in admission.admit(["w0"])] == [a]
    candidate = Footprint(20, 30, 5.0)
    assert admission._workers["w0"].fits(candidate)
    admission.update(a, Footprint(40, 30, 10.0))
    assert not admission._workers["w0"].fits(candidate)
    admission.hold(f, 1.0, candidate, "w0")
    assert admission.admit(["w0"]) == []
