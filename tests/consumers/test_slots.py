"""Slots route each event to the decider of its rollout's bundle: fed the simulator's recorded
events, every slot emits exactly the events its decider emitted in the simulation; worker events
reach bundles built later; bad policies and cancelled rollouts are handled."""

from __future__ import annotations

import gc

import events_factory as b
import pytest

from heddle.consumers.decider_decoders import decoder_for
from heddle.consumers.filters import filter_subjects, subject_of_kind
from heddle.consumers.slots import SLOTS, SlotDeciders, UnknownPolicy
from heddle.control.control_plane import ControlOptions, ControlPlane, build_control_plane
from heddle.control.systems import system_spec
from heddle.events import (
    Completed,
    DeadLettered,
    Event,
    MigrationRequested,
    Predicted,
    Prioritized,
    ReshardRequested,
    RolloutCancelled,
    RolloutFinished,
    RolloutSubmitted,
    StartTrajectory,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
    WorkerCommand,
    WorkerRegistered,
    encode,
)
from heddle.policy.prediction.online import OnlinePredictor
from heddle.sim import SimConfig, Simulator, make_simulation_predictor, plan_workers
from heddle.traces import TraceTrajectory
from heddle.workloads import generate

EMITS: dict[str, tuple[type[Event], ...]] = {
    "prediction": (Predicted,),
    "reshard": (ReshardRequested,),
    "priority": (Prioritized,),
    "placement": (TrajectoryPlaced, MigrationRequested),
    "transfer": (),
    "rollout": (RolloutFinished,),
}


def bundle(system: str, trace: list[TraceTrajectory], config: SimConfig) -> ControlPlane:
    spec = system_spec(system)
    predictor = make_simulation_predictor(trace, config) if spec.uses_predictions else None
    options = ControlOptions(cost_for_tp=config.cost_for_tp, predictor=predictor, seed=config.seed)
    return build_control_plane(spec, options)


@pytest.mark.parametrize("system", ["heddle", "verl"])
def test_slots_fed_the_simulation_emit_what_its_deciders_emitted(system: str) -> None:
    trace = generate("coding", 24, seed=1)
    config = SimConfig(model="qwen3-8b", num_gpus=4, seed=3, record_events=True)
    control = bundle(system, trace, config)
    spec = system_spec(system)
    predictor = control.deciders[0].predictor if spec.uses_predictions else None  # type: ignore[attr-defined]
    run = Simulator(trace, control, plan_workers(trace, spec, config, predictor), config).run()
    for slot in SLOTS:
        deciders = SlotDeciders(slot, lambda policy: bundle(policy, trace, config))
        emitted = {
            output.event_id: output
            for event in run.events
            for output in deciders.decide(event)
            if isinstance(output, Event)
        }
        expected = {event.event_id: event for event in run.events if isinstance(event, EMITS[slot])}
        if slot == "transfer" or (not spec.uses_predictions and slot == "prediction"):
            assert emitted == {}
            continue
        assert emitted == expected, slot


def submitted(rollout_id: str, policy: str, num: int = 2) -> list[Event]:
    events: list[Event] = [
        RolloutSubmitted(
            event_id=f"{rollout_id}:submitted",
            rollout_id=rollout_id,
            occurred_at=2.0,
            policy=policy,
            num_trajectories=num,
        )
    ]
    for index in range(num):
        spec = TrajectorySpec(group_id="g", index=index, environment="trace", prompt_token_ids=[1])
        events.append(
            TrajectorySubmitted(
                event_id=f"{rollout_id}:t{index}:submitted",
                rollout_id=rollout_id,
                occurred_at=2.0,
                traj_id=f"t{index}",
                spec=spec,
            )
        )
    return events


def make_bundle(policy: str) -> ControlPlane:
    config = SimConfig(model="qwen3-8b")
    options = ControlOptions(cost_for_tp=config.cost_for_tp, predictor=OnlinePredictor())
    return build_control_plane(system_spec(policy), options)


def test_a_bundle_built_later_knows_the_workers_registered_before() -> None:
    placement = SlotDeciders("placement", make_bundle)
    assert placement.decide(b.worker("w00", at=1.0)) == []
    assert placement.decide(b.worker("w01", at=1.0)) == []
    outputs = [o for e in submitted("r1", "verl") for o in placement.decide(e)]
    starts = [o for o in outputs if isinstance(o, StartTrajectory)]
    assert {start.traj_id for start in starts} == {"t0", "t1"}
    assert {start.worker_id for start in starts} <= {"w00", "w01"}
    assert placement.policies == ["verl"]
    assert placement.rollouts_seen == {"r1"}


def test_rollouts_of_two_policies_run_on_their_own_deciders() -> None:
    rollout = SlotDeciders("rollout", make_bundle)
    for event in [*submitted("r1", "verl", 1), *submitted("r2", "slime", 1)]:
        rollout.decide(event)
    finished = rollout.decide(
        Completed(event_id="c", rollout_id="r2", occurred_at=5.0, traj_id="t0", num_steps=1)
    )
    assert [type(o) for o in finished] == [RolloutFinished]
    verl = rollout.decider_for("verl")
    slime = rollout.decider_for("slime")
    assert verl is not None and slime is not None and verl is not slime
    assert set(slime.snapshot()) == {"r2"}  # type: ignore[attr-defined]


def test_a_submission_naming_no_bundle_is_refused_and_its_events_skipped() -> None:
    placement = SlotDeciders("placement", make_bundle)
    events = submitted("r1", "no-such-policy")
    with pytest.raises(UnknownPolicy, match="no-such-policy"):
        placement.decide(events[0])
    assert placement.decide(events[1]) == []
    assert placement.num_skipped == 1


def test_a_cancelled_rollout_gets_no_more_commands() -> None:
    placement = SlotDeciders("placement", make_bundle)
    placement.decide(b.worker("w00", at=1.0))
    events = submitted("r1", "verl")
    cancel = RolloutCancelled(event_id="r1:cancelled", rollout_id="r1", occurred_at=3.0)
    outputs = [o for e in [*events[:2], cancel, *events[2:]] for o in placement.decide(e)]
    assert not [o for o in outputs if isinstance(o, (WorkerCommand, TrajectoryPlaced))]


class _Echo:
    """A priority decider that answers every prediction (whatever the trajectory's state)."""

    name = "priority"
    handles = frozenset({Predicted})

    def decide(self, event: Event) -> list[object]:
        if not isinstance(event, Predicted):
            return []
        return [Prioritized(event_id=f"{event.event_id}:p", rollout_id=event.rollout_id,
                            occurred_at=event.occurred_at, traj_id=event.traj_id,
                            worker_id="w0", priority=1.0)]  # fmt: skip


class _EchoBundle:
    deciders = (_Echo(),)


def _predicted(traj_id: str, rollout_id: str = "r1") -> Predicted:
    return Predicted(
        event_id=f"{rollout_id}:{traj_id}:p", rollout_id=rollout_id, occurred_at=5.0,
        traj_id=traj_id, step=0, predicted_remaining_tokens=1.0, predictor="x",
    )  # fmt: skip


def test_nothing_is_emitted_about_a_finished_trajectory() -> None:
    """A decider's output about a trajectory the slot saw end (or of a finished rollout) is
    dropped: a late event must not move what has ended."""
    slot = SlotDeciders("priority", lambda policy: _EchoBundle())  # type: ignore[arg-type,return-value]
    for event in submitted("r1", "heddle", 2):
        slot.decide(event)
    assert len(slot.decide(_predicted("t0"))) == 1
    slot.decide(
        Completed(event_id="c", rollout_id="r1", occurred_at=5.0, traj_id="t0", num_steps=1)
    )
    assert slot.decide(_predicted("t0")) == []
    assert [o.traj_id for o in slot.decide(_predicted("t1"))] == ["t1"]  # type: ignore[union-attr]
    slot.decide(RolloutFinished(event_id="f", rollout_id="r1", occurred_at=6.0, num_completed=2))
    assert slot.decide(_predicted("t1")) == []


def test_filter_subjects_cover_each_family() -> None:
    assert subject_of_kind(Predicted) == "heddle.evt.traj.*.*.predicted"
    assert subject_of_kind(RolloutSubmitted) == "heddle.evt.rollout.*.submitted"
    assert subject_of_kind(WorkerRegistered) == "heddle.evt.worker.*.registered"
    assert subject_of_kind(DeadLettered) == "heddle.evt.deadletter"
    subjects = filter_subjects([Predicted, Predicted, RolloutSubmitted])
    assert subjects == ("heddle.evt.rollout.*.submitted", "heddle.evt.traj.*.*.predicted")


@pytest.mark.parametrize("system", ["heddle", "autellix"])
def test_the_lean_decoder_changes_no_decision(system: str) -> None:
    """Deciders fed events through their slot's lean decoder (token lists counted, not parsed;
    the router's prompt ids as tuples) publish exactly what they publish on fully decoded
    events, byte for byte."""
    trace = generate("coding", 16, seed=5)
    config = SimConfig(model="qwen3-8b", num_gpus=4, seed=1, record_events=True)
    control = bundle(system, trace, config)
    spec = system_spec(system)
    predictor = control.deciders[0].predictor if spec.uses_predictions else None  # type: ignore[attr-defined]
    run = Simulator(trace, control, plan_workers(trace, spec, config, predictor), config).run()
    encoded = [encode(event) for event in run.events]
    for slot in SLOTS:
        lean_events = [decoder_for(slot)(data) for data in encoded]
        full = SlotDeciders(slot, lambda policy: bundle(policy, trace, config))
        lean = SlotDeciders(slot, lambda policy: bundle(policy, trace, config))
        for event, counted in zip(run.events, lean_events, strict=True):
            assert type(counted) is type(event)
            published = [encode(output) for output in lean.decide(counted)]
            assert published == [encode(output) for output in full.decide(event)], (slot, event)


@pytest.mark.parametrize("prompt", [[7, 8, 9], list(range(64))], ids=["plain", "compact"])
def test_the_routers_prompt_ids_leave_the_cycle_collector(prompt: list[int]) -> None:
    """The router keeps every live spec: its prompt ids come as a tuple, which the collector
    stops tracking, and encode as the list they were (heddle.consumers.decider_decoders), in either
    wire form (short lists stay plain)."""
    spec = TrajectorySpec(group_id="g", index=0, environment="trace", prompt_token_ids=prompt)
    submitted = TrajectorySubmitted(
        event_id="e", rollout_id="r", occurred_at=1.0, traj_id="t", spec=spec
    )
    decoded = decoder_for("placement")(encode(submitted))
    assert isinstance(decoded, TrajectorySubmitted)
    assert decoded.spec.prompt_token_ids == tuple(prompt)
    assert encode(decoded) == encode(submitted)
    gc.collect()
    assert not gc.is_tracked(decoded.spec.prompt_token_ids)
