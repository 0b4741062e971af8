"""The router holds one bundle per policy and routes each event to its rollout's: fed the
simulator's recorded events it emits exactly what the simulated bundle emitted, in one stage or
split in two; worker events reach bundles built later; unknown policies and rollouts are refused
or skipped; a cancelled rollout gets no more commands; a router rebuilt from the same events
decides the rest as the first one does."""

from __future__ import annotations

import events_factory as b
import pytest

from heddle.control import ControlOptions, DeciderBundle, build_bundle, system_spec
from heddle.control.bundle_router import PLACEMENT, BundleRouter, UnknownPolicy
from heddle.events import (
    Completed,
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
    encode,
)
from heddle.policy.prediction.online import OnlinePredictor
from heddle.sim import SimConfig, Simulator, make_simulation_predictor, plan_workers
from heddle.traces import TraceTrajectory
from heddle.workloads import generate

DECIDED = (
    Predicted,
    ReshardRequested,
    Prioritized,
    TrajectoryPlaced,
    MigrationRequested,
    RolloutFinished,
)
"""The events the deciders emit (the simulated data plane emits none of them)."""


def options_for(trace: list[TraceTrajectory], config: SimConfig) -> ControlOptions:
    predictor = make_simulation_predictor(trace, config)
    return ControlOptions(cost_for_tp=config.cost_for_tp, predictor=predictor, seed=config.seed)


def simulated(system: str, trace: list[TraceTrajectory], config: SimConfig) -> list[Event]:
    spec = system_spec(system)
    options = options_for(trace, config)
    control: DeciderBundle = build_bundle(spec, options)
    degrees = plan_workers(trace, spec, config, options.predictor)
    return Simulator(trace, control, degrees, config).run().events


def decide_all(router: BundleRouter, events: list[Event]) -> list[Event]:
    """Every stage decides every event it handles, in order (stage by stage per event)."""
    outputs: list[Event] = []
    for event in events:
        for stage in router.stages:
            if type(event) in stage.handles:
                outputs += [o for o in stage.decide(event) if isinstance(o, Event)]
    return outputs


@pytest.mark.parametrize("first", [(), (PLACEMENT,)], ids=["one stage", "router first"])
@pytest.mark.parametrize("system", ["heddle", "verl"])
def test_the_router_fed_the_simulation_emits_what_the_bundle_emitted(
    system: str, first: tuple[str, ...]
) -> None:
    trace = generate("coding", 24, seed=1)
    config = SimConfig(model="qwen3-8b", num_gpus=4, seed=3, record_events=True)
    events = simulated(system, trace, config)
    router = BundleRouter(options_for(trace, config), first=first)
    emitted = {output.event_id: output for output in decide_all(router, events)}
    expected = {event.event_id: event for event in events if isinstance(event, DECIDED)}
    assert emitted and emitted == expected
    assert router.policies == [system] and router.num_skipped == 0


def test_a_router_rebuilt_from_the_same_events_decides_the_rest_alike() -> None:
    """Replay after a restart: a new router folds the first half (outputs discarded) and then
    decides the second half byte for byte as the router that never stopped."""
    trace = generate("coding", 16, seed=2)
    config = SimConfig(model="qwen3-8b", num_gpus=4, seed=5, record_events=True)
    events = simulated("heddle", trace, config)
    half = len(events) // 2
    running = BundleRouter(options_for(trace, config), first=(PLACEMENT,))
    decide_all(running, events[:half])
    restarted = BundleRouter(options_for(trace, config), first=(PLACEMENT,))
    decide_all(restarted, events[:half])
    assert restarted.bundles["heddle"] is not running.bundles["heddle"]
    rest = [encode(o) for o in decide_all(running, events[half:])]
    assert rest and [encode(o) for o in decide_all(restarted, events[half:])] == rest


def make_router(first: tuple[str, ...] = ()) -> BundleRouter:
    config = SimConfig(model="qwen3-8b")
    options = ControlOptions(cost_for_tp=config.cost_for_tp, predictor=OnlinePredictor())
    return BundleRouter(options, first=first)


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


def outputs_of(router: BundleRouter, events: list[Event]) -> list[object]:
    return [o for e in events for stage in router.stages for o in stage.decide(e)]


def test_a_bundle_built_later_knows_the_workers_registered_before() -> None:
    router = make_router(first=(PLACEMENT,))
    assert outputs_of(router, [b.worker("w00", at=1.0), b.worker("w01", at=1.0)]) == []
    outputs = outputs_of(router, submitted("r1", "verl"))
    starts = [o for o in outputs if isinstance(o, StartTrajectory)]
    assert {start.traj_id for start in starts} == {"t0", "t1"}
    assert {start.worker_id for start in starts} <= {"w00", "w01"}
    assert router.policies == ["verl"] and router.rollouts_seen == {"r1"}


def test_rollouts_of_two_policies_run_on_their_own_bundles() -> None:
    router = make_router()
    outputs_of(router, [*submitted("r1", "verl", 1), *submitted("r2", "slime", 1)])
    done = Completed(event_id="c", rollout_id="r2", occurred_at=5.0, traj_id="t0", num_steps=1)
    assert [type(o) for o in outputs_of(router, [done])] == [RolloutFinished]
    (stage,) = router.stages
    verl, slime = stage.decider("verl", "rollout"), stage.decider("slime", "rollout")
    assert verl is not None and slime is not None and verl is not slime
    assert set(slime.snapshot()) == {"r2"}  # type: ignore[attr-defined]


def test_a_submission_naming_no_bundle_is_refused_and_its_events_skipped() -> None:
    router = make_router(first=(PLACEMENT,))
    events = submitted("r1", "no-such-policy")
    for stage in router.stages:
        with pytest.raises(UnknownPolicy, match="no-such-policy"):
            stage.decide(events[0])
    assert outputs_of(router, [events[1]]) == []
    assert router.num_skipped == 1 and router.policies == []


def test_a_cancelled_rollout_gets_no_more_commands() -> None:
    router = make_router(first=(PLACEMENT,))
    outputs_of(router, [b.worker("w00", at=1.0)])
    events = submitted("r1", "verl")
    cancel = RolloutCancelled(event_id="r1:cancelled", rollout_id="r1", occurred_at=3.0)
    outputs = outputs_of(router, [*events[:2], cancel, *events[2:]])
    assert not [o for o in outputs if isinstance(o, (WorkerCommand, TrajectoryPlaced))]
    uncancelled = make_router(first=(PLACEMENT,))
    outputs = outputs_of(uncancelled, [b.worker("w00", at=1.0), *events])
    assert [o for o in outputs if isinstance(o, StartTrajectory)]  # the cancellation did it


def test_stages_split_the_deciders_by_name() -> None:
    router = make_router(first=(PLACEMENT,))
    assert [stage.slot for stage in router.stages] == [
        "placement",
        "prediction+reshard+priority+transfer+rollout",
    ]
    with pytest.raises(ValueError, match="no decider named"):
        make_router(first=("router",))
