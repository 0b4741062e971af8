"""The placement strategies through the decider: admission's one interface (``AdmitAll``), the
operator's drain, re-placement of a trajectory in a tool call, and, over random valid streams with
failures and drains, in-flight counts that match the trajectories generating on each worker."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import events_factory as b
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from heddle.control.decider import Output
from heddle.control.placement import (
    AdmissionConfig,
    AdmissionRequest,
    AdmitAll,
    Admitted,
    KvAdmissionGate,
    PlacementDecider,
    PresortedPlacer,
    RouterPlacer,
)
from heddle.events import (
    ContinueTrajectory,
    Event,
    StartTrajectory,
    WorkerDrainRequested,
    WorkerRegistered,
    WorkerUndrainRequested,
)
from heddle.policy.cost.model import AnalyticCostModel, preset
from heddle.policy.scheduling.priority import priority_policy


def cost_for_tp(tp: int) -> AnalyticCostModel:
    return preset("qwen3-32b", "h200", tp)


def drain(worker_id: str, undo: bool = False) -> Event:
    kind = WorkerUndrainRequested if undo else WorkerDrainRequested
    return kind(event_id=f"{worker_id}:{undo}", occurred_at=1.0, worker_id=worker_id)


def request(traj_id: str, worker_id: str) -> AdmissionRequest:
    return AdmissionRequest(
        key=("r", traj_id),
        planned_worker_id=worker_id,
        submitted_at=0.0,
        index=0,
        context_tokens=100,
        predicted_remaining_tokens=50.0,
        predicted_remaining_tool_s=0.0,
    )


def test_admit_all_starts_every_planned_trajectory_once_on_its_planned_worker() -> None:
    admission = AdmitAll()
    admission.plan(request("t1", "w1"))
    admission.plan(request("t0", "w0"))
    assert admission.admit(["w0"]) == [Admitted(("r", "t1"), "w1"), Admitted(("r", "t0"), "w0")]
    assert admission.admit(["w0", "w1"]) == []
    assert admission.has_room("w0", ("r", "t1")) and admission.snapshot() is None


def test_a_draining_worker_takes_no_new_trajectory_until_undrained() -> None:
    decider = PlacementDecider(lambda: RouterPlacer("least_load", random.Random(0)))
    decider.decide(b.worker("w0"))
    assert decider.decide(drain("w0")) == []
    opening = [b.rollout(2), b.submitted("t0", 0), b.submitted("t1", 1)]
    assert [o for e in opening for o in decider.decide(e)] == []  # no candidate worker
    outputs = decider.decide(b.worker("w1"))
    assert {o.worker_id for o in outputs if isinstance(o, StartTrajectory)} == {"w1"}
    outputs = decider.decide(drain("w0", undo=True))
    assert outputs == []  # placed already: undraining moves nothing
    assert decider.snapshot()[5] == frozenset()


def test_a_step_is_not_routed_to_a_draining_worker() -> None:
    """Least load would send t0's next step to the idle w1; drained, w1 takes no one's step."""
    decider = PlacementDecider(lambda: RouterPlacer("least_load", random.Random(0)))
    for event in (b.worker("w0"), b.worker("w1"), b.rollout(2)):
        decider.decide(event)
    decider.decide(b.submitted("t0", 0))
    outputs = decider.decide(b.submitted("t1", 1))
    assert {o.traj_id: o.worker_id for o in outputs if isinstance(o, StartTrajectory)} == {
        "t0": "w0",
        "t1": "w1",
    }
    decider.decide(drain("w1"))
    decider.decide(b.completed("t1", 1, 5))
    decider.decide(b.tool_called("t0", 0))
    (step,) = decider.decide(b.tool_returned("t0", 0))
    assert isinstance(step, ContinueTrajectory) and step.worker_id == "w0"


def test_a_re_placed_trajectory_in_a_tool_call_is_not_in_flight_on_its_new_worker() -> None:
    decider = PlacementDecider(lambda: RouterPlacer("cache_affinity", random.Random(0)))
    opening = (b.worker("w0"), b.rollout(1), b.submitted("t0", 0))
    outputs = [o for e in opening for o in decider.decide(e)]
    assert [o.worker_id for o in outputs if isinstance(o, StartTrajectory)] == ["w0"]
    decider.decide(b.worker("w1"))
    decider.decide(b.tool_called("t0", 0))
    (_, start) = decider.decide(b.worker_failed("w0"))
    assert isinstance(start, StartTrajectory) and start.resume and start.worker_id == "w1"
    assert decider.snapshot()[1] == {"w1": 0}
    (step,) = decider.decide(b.tool_returned("t0", 0))
    assert isinstance(step, ContinueTrajectory) and step.worker_id == "w1"
    assert decider.snapshot()[1] == {"w1": 1}


@dataclass
class DataPlane:
    """What the workers do with the decider's commands: the reference the counts are checked
    against."""

    live: list[str]
    draining: set[str] = field(default_factory=set)
    worker_of: dict[str, str] = field(default_factory=dict)
    generating: set[str] = field(default_factory=set)
    in_tool: set[str] = field(default_factory=set)
    returning: set[str] = field(default_factory=set)
    """Tool results sent: the decider routes their next step."""
    step: dict[str, int] = field(default_factory=dict)

    def apply(self, outputs: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, StartTrajectory):
                assert output.worker_id in self.live
                assert output.worker_id not in self.draining or self.draining >= set(self.live)
                if output.traj_id not in self.worker_of:
                    self.step[output.traj_id] = 0
                    self.returning.add(output.traj_id)  # its first step runs now
                self.worker_of[output.traj_id] = output.worker_id
            elif isinstance(output, ContinueTrajectory):
                assert output.worker_id == self.worker_of[output.traj_id]
            else:
                continue
            if output.traj_id in self.returning:  # a step starts: re-placed ones keep theirs
                self.returning.discard(output.traj_id)
                self.generating.add(output.traj_id)

    def expected_in_flight(self) -> dict[str, int]:
        return {w: sum(self.worker_of[t] == w for t in self.generating) for w in self.live}


def _events(plane: DataPlane, kind: int, pick: int) -> list[Event]:
    """One applicable action of ``kind``, its subject picked by ``pick`` (none if none applies)."""
    generating, in_tool = sorted(plane.generating), sorted(plane.in_tool)
    if kind == 0 and generating:  # a step ends in a tool call
        traj = generating[pick % len(generating)]
        plane.generating.discard(traj)
        plane.in_tool.add(traj)
        worker, step = plane.worker_of[traj], plane.step[traj]
        return [b.generated(traj, step, 7, worker_id=worker), b.tool_called(traj, step, worker)]
    if kind == 1 and in_tool:  # the tool returns
        traj = in_tool[pick % len(in_tool)]
        plane.in_tool.discard(traj)
        plane.returning.add(traj)
        plane.step[traj] += 1
        return [b.tool_returned(traj, plane.step[traj] - 1)]
    if kind == 2 and generating:  # the trajectory completes
        traj = generating[pick % len(generating)]
        plane.generating.discard(traj)
        return [b.completed(traj, plane.step[traj] + 1, 7)]
    if kind == 3 and len(plane.live) > 1:  # a worker fails
        worker = plane.live.pop(pick % len(plane.live))
        plane.draining.discard(worker)
        return [b.worker_failed(worker)]
    if kind == 4 and plane.live:  # drain or undrain
        worker = plane.live[pick % len(plane.live)]
        undo = worker in plane.draining
        plane.draining.symmetric_difference_update({worker})
        return [drain(worker, undo)]
    return []


def _decider(placer: str, capacity: int) -> PlacementDecider:
    if placer == "presorted":
        gate = KvAdmissionGate(AdmissionConfig(overcommit=1.0), priority_policy("pps"))
        admission = gate if capacity else None
        return PlacementDecider(lambda: PresortedPlacer(cost_for_tp), admission=admission)
    rng = random.Random(0)
    return PlacementDecider(lambda: RouterPlacer(placer, rng))


@settings(max_examples=60)
@given(
    placer=st.sampled_from(["least_load", "cache_affinity", "presorted"]),
    num_workers=st.integers(1, 3),
    num_trajectories=st.integers(1, 6),
    capacity=st.sampled_from([0, 400, 5000]),
    actions=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 10)), max_size=60),
)
def test_in_flight_counts_match_the_trajectories_generating_on_each_worker(
    placer: str,
    num_workers: int,
    num_trajectories: int,
    capacity: int,
    actions: list[tuple[int, int]],
) -> None:
    decider = _decider(placer, capacity)
    plane = DataPlane([])
    workers = [f"w{i}" for i in range(num_workers)]
    opening: list[Event] = [replace(b.worker(w), max_kv_tokens=capacity) for w in workers]
    opening.append(b.rollout(num_trajectories))
    opening += [b.submitted(f"t{i}", i) for i in range(num_trajectories)]
    opening += [b.predicted(f"t{i}", -1, 100.0 * (i + 1)) for i in range(num_trajectories)]
    for kind, pick in [(-1, 0), *actions]:
        for event in opening if kind < 0 else _events(plane, kind, pick):
            if isinstance(event, WorkerRegistered):
                plane.live.append(event.worker_id)
            plane.apply(decider.decide(event))
        assert decider.snapshot()[1] == plane.expected_in_flight()  # after each action
    assert plane.worker_of, "something started"
