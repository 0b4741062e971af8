"""ThunderAgent's program gate (``ProgramGate``): where new programs start, which pause under KV
pressure and where they resume; in the placement decider, a paused program's next step waits and
resumes where the scheduler puts it; and invariants over random runs."""

from __future__ import annotations

import random

import events_factory as b
from hypothesis import given
from hypothesis import strategies as st

from heddle.control.placement import (
    AdmissionRequest,
    PlacementDecider,
    ProgramGate,
    ProgramGateConfig,
    RouterPlacer,
)
from heddle.control.placement.programs import Status
from heddle.events import (
    ContinueTrajectory,
    Event,
    StartTrajectory,
    TrajectoryPlaced,
    WorkerRegistered,
)


def request(index: int, prompt: int) -> AdmissionRequest:
    return AdmissionRequest(
        key=(b.ROLLOUT, f"t{index}"),
        planned_worker_id=None,
        submitted_at=0.0,
        index=index,
        context_tokens=prompt,
        predicted_remaining_tokens=0.0,
        predicted_remaining_tool_s=0.0,
    )


def gate_with(capacities: dict[str, int]) -> ProgramGate:
    gate = ProgramGate()
    for worker_id, capacity in capacities.items():
        gate.add_worker(worker_id, capacity)
    return gate


def test_a_new_program_starts_where_fewest_tokens_run_if_it_fits() -> None:
    gate = gate_with({"w0": 1000, "w1": 1000})
    for index, prompt in enumerate([500, 300, 300, 800, 10]):
        gate.plan(request(index, prompt))
    started = {key[1]: worker for key, worker in gate.admit(["w0", "w1"])}
    # t0 takes w0 (a tie: the first); t1 the emptier w1; t2 the one with fewer tokens (w1).
    # t3 fits nowhere and waits; then the pool is not empty, so t4 waits behind it though it fits.
    assert started == {"t0": "w0", "t1": "w1", "t2": "w1"}


def test_a_program_no_empty_backend_holds_starts_when_nothing_runs() -> None:
    """A program whose tokens plus buffer exceed every backend's whole KV would wait for the
    timeout on an idle cluster, where no event ever comes: it starts at once, the longest
    waiting first, on the backend with the fewest programs; the next waits behind it."""
    gate = gate_with({"w0": 50, "w1": 50})
    gate.plan(request(0, 40))
    gate.plan(request(1, 10))
    assert [(key[1], worker) for key, worker in gate.admit(["w0", "w1"])] == [("t0", "w0")]
    assert gate.admit(["w0", "w1"]) == []  # t0 runs: t1 waits for room or a check
    gate.finished((b.ROLLOUT, "t0"))
    assert [key[1] for key, _ in gate.admit(["w0", "w1"])] == ["t1"]


def test_an_overloaded_backend_pauses_its_smallest_acting_program_first() -> None:
    gate = gate_with({"w0": 1000})
    for index, prompt in enumerate([400, 150, 100]):
        gate.plan(request(index, prompt))
    gate.admit(["w0"])
    gate.tick(0.0)
    for index, tokens in ((0, 700), (1, 350)):  # t0 and t1 finish a step and call tools
        gate.generated(b.generated(f"t{index}", 0, 1))
        gate.grew((b.ROLLOUT, f"t{index}"), tokens)
    gate.grew((b.ROLLOUT, "t2"), 400)  # t2 still generating: REASONING
    # 700 + 350 + 400 + 3 x 100 = 1750 > 1000: pause t1 (ACTING, smallest), then t0 (ACTING),
    # and w0 is within capacity again (400 + 100 <= 1000) before t2 need be marked.
    assert not gate.tick(5.0)
    assert gate.holds_step((b.ROLLOUT, "t1")) and gate.holds_step((b.ROLLOUT, "t0"))
    assert not gate.holds_step((b.ROLLOUT, "t2"))


def test_a_reasoning_program_marked_for_pause_pauses_at_its_next_tool_call() -> None:
    gate = gate_with({"w0": 1000})
    gate.plan(request(0, 800))
    gate.admit(["w0"])
    gate.tick(0.0)
    gate.grew((b.ROLLOUT, "t0"), 1200)  # it generates on, past the capacity
    gate.plan(request(1, 50))
    assert gate.admit(["w0"]) == []  # no room for a new one
    gate.tick(5.0)  # over capacity, nothing ACTING: t0 is marked, and runs on
    assert not gate.holds_step((b.ROLLOUT, "t0"))
    gate.generated(b.generated("t0", 0, 1))  # its step ends: it pauses now
    assert gate.holds_step((b.ROLLOUT, "t0"))


def test_a_program_waiting_past_the_timeout_resumes_regardless() -> None:
    gate = ProgramGate(ProgramGateConfig(wait_timeout_s=100.0))
    gate.add_worker("w0", 1000)
    gate.plan(request(0, 800))
    gate.plan(request(1, 800))
    assert [key[1] for key, _ in gate.admit(["w0"])] == ["t0"]
    gate.tick(0.0)
    assert not gate.tick(50.0)
    assert gate.tick(105.0)  # t1 waited 105 s: forced in beside t0
    assert [key[1] for key, _ in gate.admit(["w0"])] == ["t1"]


def registered(worker_id: str, capacity: int) -> WorkerRegistered:
    return WorkerRegistered(
        event_id=f"{worker_id}:registered",
        occurred_at=0.0,
        worker_id=worker_id,
        engine="sim",
        max_kv_tokens=capacity,
    )


def test_a_paused_programs_step_waits_and_resumes_on_the_backend_with_room() -> None:
    decider = PlacementDecider(
        lambda: RouterPlacer("least_load", random.Random(0), locality_threshold_tokens=0),
        admission=ProgramGate(),
    )
    events: list[Event] = [registered("w0", 1000), registered("w1", 1000), b.rollout(3)]
    events += [b.submitted(f"t{i}", i, prompt=p) for i, p in enumerate([400, 400, 150])]
    outputs = [o for event in events for o in decider.decide(event)]
    starts = {o.traj_id: o.worker_id for o in outputs if isinstance(o, StartTrajectory)}
    assert starts == {"t0": "w0", "t1": "w1", "t2": "w0"}
    for event in (
        b.generated("t2", 0, 200, at=1.0),
        b.tool_called("t2", 0, at=1.0),
        b.generated("t0", 0, 300, at=1.0),
        b.tool_called("t0", 0, at=1.0),
    ):
        decider.decide(event)
    decider.decide(b.generated("t1", 0, 5, worker_id="w1", at=5.0))  # the check: t2 pauses
    assert decider.decide(b.tool_returned("t2", 0, tokens=10, at=6.0)) == []  # its step waits
    # t0's step is not held: it continues where it is.
    (step,) = decider.decide(b.tool_returned("t0", 0, tokens=10, at=7.0))
    assert isinstance(step, ContinueTrajectory) and step.worker_id == "w0"
    resumed = decider.decide(b.tool_called("t1", 0, worker_id="w1", at=10.0))
    placed = [o for o in resumed if isinstance(o, TrajectoryPlaced)]
    start = [o for o in resumed if isinstance(o, StartTrajectory)]
    # w0 has 1000 - 710 - 100 = 190 left, w1 1000 - 405 - 100 = 495: t2 (360 + 100) fits w1.
    assert [(p.traj_id, p.worker_id, p.reason) for p in placed] == [("t2", "w1", "migration")]
    assert start[0].resume and start[0].source_worker_id == "w0"


@given(
    st.lists(st.integers(50, 900), min_size=1, max_size=12),
    st.lists(st.sampled_from([400, 1000, 2500]), min_size=1, max_size=3),
    st.randoms(use_true_random=False),
)
def test_after_every_check_backends_are_within_capacity_or_have_nothing_left_to_pause(
    prompts: list[int], capacities: list[int], rng: random.Random
) -> None:
    workers = {f"w{i}": capacity for i, capacity in enumerate(capacities)}
    gate = gate_with(workers)
    for index, prompt in enumerate(prompts):
        gate.plan(request(index, prompt))
    live = list(workers)
    active: dict[str, str] = {}
    in_tool: set[str] = set()
    for now in range(0, 200, 5):
        for key, worker_id in gate.admit(live):
            assert worker_id in workers
            active[key[1]] = worker_id or ""
        for traj_id in sorted(active):
            move = rng.random()
            key = (b.ROLLOUT, traj_id)
            if move < 0.3 and traj_id not in in_tool:
                gate.generated(b.generated(traj_id, 0, 1))
                gate.grew(key, rng.randint(50, 900))
                in_tool.add(traj_id)
            elif move < 0.6 and traj_id in in_tool:
                in_tool.discard(traj_id)
                if gate.holds_step(key):
                    del active[traj_id]  # paused: it comes back from admit
            elif move < 0.7:
                gate.finished(key)
                active.pop(traj_id)
                in_tool.discard(traj_id)
        gate.tick(float(now))  # from 5 s on, every call runs the periodic check
        if now == 0:
            continue
        for backend in gate._backends.values():
            over = backend.remaining(1.0) + backend.future_paused_tokens < 0
            movable = backend.smallest(Status.ACTING) or backend.smallest(Status.REASONING)
            assert not (over and movable)
            assert backend.future_paused_tokens >= 0
        assert all(p.backend is None for p in gate._pool.values())
