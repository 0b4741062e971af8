"""Deciders rebuild identical state by replaying the recorded history, and re-emit exactly the
events they emitted the first time (same ids, same contents)."""

from __future__ import annotations

import copy

import pytest

from heddle.control.bundle import ControlOptions, DeciderBundle, build_bundle
from heddle.control.decider import rebuild_decider
from heddle.control.systems import system_spec
from heddle.events import Event
from heddle.sim import SimConfig, Simulator, make_simulation_predictor, plan_workers
from heddle.traces import TraceTrajectory
from heddle.workloads import generate


def control_plane(system: str, trace: list[TraceTrajectory], config: SimConfig) -> DeciderBundle:
    spec = system_spec(system)
    predictor = make_simulation_predictor(trace, config) if spec.uses_predictions else None
    options = ControlOptions(cost_for_tp=config.cost_for_tp, predictor=predictor, seed=config.seed)
    return build_bundle(spec, options)


def snapshots(control: DeciderBundle) -> list[object]:
    """Every decider's state, copied (the live deciders keep mutating their records)."""
    return copy.deepcopy([d.snapshot() for d in control.deciders])  # type: ignore[attr-defined]


@pytest.mark.parametrize("system", ["heddle", "verl", "slime-least-inflight", "autellix"])
def test_replaying_the_recorded_history_rebuilds_identical_state(system: str) -> None:
    trace = generate("coding", 40, seed=2)
    config = SimConfig(model="qwen3-8b", num_gpus=4, seed=3, record_events=True)
    live = control_plane(system, trace, config)
    spec = system_spec(system)
    predictor = live.deciders[0].predictor if spec.uses_predictions else None  # type: ignore[attr-defined]
    simulator = Simulator(trace, live, plan_workers(trace, spec, config, predictor), config)
    midway: list[tuple[int, list[object]]] = []

    def capture(fraction: float) -> None:  # the live state half-way through the rollout
        if fraction >= 0.5 and not midway:
            midway.append((len(simulator.recorded_events), snapshots(live)))

    run = simulator.run(capture)
    ((num_events, live_state),) = midway
    recorded: dict[str, Event] = {event.event_id: event for event in run.events}

    rebuilt = control_plane(system, trace, config)
    emitted: list[Event] = []
    for decider in rebuilt.deciders:
        for event in run.events[:num_events]:
            if type(event) in decider.handles:
                emitted += [o for o in decider.decide(event) if isinstance(o, Event)]
    assert snapshots(rebuilt) == live_state
    assert any(snapshot for snapshot in live_state), "mid-rollout state is not empty"
    assert emitted, "the deciders emit events"
    for event in emitted:  # re-published duplicates: JetStream would drop them by id
        assert recorded[event.event_id] == event

    final = control_plane(system, trace, config)
    for decider in final.deciders:
        assert rebuild_decider(decider, run.events) > 0
    assert snapshots(final) == snapshots(live)
