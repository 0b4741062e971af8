"""Re-simulation: a rollout recorded in the stream (here by the simulator itself, published to a
real nats-server) is exported from a rebuilt ledger and simulated again; under the recorded
policy on the recorded cluster it reproduces the recorded makespan exactly."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from heddle.bus import Bus
from heddle.config import Settings
from heddle.control.bundle import ControlOptions, build_bundle
from heddle.control.systems import system_spec
from heddle.ledger import open_ledger
from heddle.replay import rebuild_ledger
from heddle.sim import SimConfig, Simulator, make_simulation_predictor, simulate
from heddle.sim.simulator import Run
from heddle.traces import TraceStep, TraceTrajectory
from heddle.whatif import (
    Recording,
    WhatIfOptions,
    choose_predictor,
    load_recording,
    recorded_cluster,
    resimulate,
)
from heddle.workloads import generate

TP_DEGREES = [1, 2, 1]
CONFIG = SimConfig(model="qwen3-8b", hardware="h100", num_gpus=4, predictor="oracle",
                   record_events=True)  # fmt: skip


def trace(num: int = 40) -> list[TraceTrajectory]:
    """A coding trace whose observations add no tokens: a ledger holds every step length then
    (the simulator publishes no ``GenerationStarted`` carrying observation tokens)."""
    return [
        msgspec.structs.replace(
            t, steps=[TraceStep(output_tokens=s.output_tokens, tool_s=s.tool_s) for s in t.steps]
        )
        for t in generate("coding", num, seed=5)
    ]


def recorded_run(policy: str, steps: list[TraceTrajectory]) -> Run:
    options = ControlOptions(
        cost_for_tp=CONFIG.cost_for_tp, predictor=make_simulation_predictor(steps, CONFIG)
    )
    control = build_bundle(system_spec(policy), options)
    return Simulator(steps, control, TP_DEGREES, CONFIG).run()


@pytest.mark.parametrize(
    ("recorded", "other", "predictor"), [("verl", "heddle", ""), ("heddle", "slime", "oracle")]
)
async def test_a_recorded_rollout_is_reproduced_then_re_simulated(
    nats_url: str, tmp_path: Path, recorded: str, other: str, predictor: str
) -> None:
    steps = trace()
    run = recorded_run(recorded, steps)
    async with Bus(Settings(nats_url=nats_url, data_dir=tmp_path)) as bus:
        await bus.publish_many(run.events)
        ledger = open_ledger(f"sqlite:///{tmp_path / 'replayed.db'}")
        try:
            await rebuild_ledger(bus, ledger, "sim")
            recording = await load_recording(bus, ledger, "sim")
        finally:
            ledger.close()
    assert [(t.prompt_tokens, t.steps) for t in recording.trace] == [
        (t.prompt_tokens, t.steps) for t in steps
    ]
    assert recording.policy == recorded and recording.predictor == predictor
    assert recording.makespan_s == pytest.approx(run.makespan_s)
    assert recording.cluster.tp_degrees == TP_DEGREES
    assert (recording.cluster.model, recording.cluster.hardware) == ("qwen3-8b", "h100")

    report = resimulate(recording, [other], WhatIfOptions(predictor="oracle"))
    assert list(report.results) == [recorded, other]
    assert report.results[recorded].makespan_s == pytest.approx(run.makespan_s, rel=1e-9)
    document = report.to_json()
    assert document["simulated_over_recorded"] == pytest.approx(1.0)
    ratio = report.results[other].makespan_s / report.results[recorded].makespan_s
    assert document["makespan_over_simulated_recorded"] == {other: pytest.approx(ratio)}
    assert document["cluster"]["tp_degrees"] == TP_DEGREES  # type: ignore[index]


def test_re_simulation_equals_simulating_the_trace_directly() -> None:
    steps = trace(24)
    cluster = recorded_cluster([], ["w00", "w01"])
    recording = Recording("r1", "slime", 123.0, 24, steps, cluster, predictor="oracle")
    report = resimulate(recording, ["heddle", "slime"])
    assert report.predictor == "oracle" and report.predictor_source == "recorded"
    assert list(report.results) == ["slime", "heddle"]
    config = SimConfig(model=cluster.model, hardware=cluster.hardware, num_gpus=2,
                       predictor="oracle")  # fmt: skip
    for policy in ("slime", "heddle"):
        direct = simulate(steps, policy, config, tp_degrees=[1, 1])
        assert report.results[policy].makespan_s == direct.makespan_s
    replanned = resimulate(recording, ["heddle"], WhatIfOptions(replan=True))
    assert sum(replanned.results["heddle"].tp_degrees) == 2


def test_bad_requests_are_clear_errors() -> None:
    cluster = recorded_cluster([], ["w00"])
    recording = Recording("r1", "verl", None, 3, trace(3), cluster)
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        resimulate(recording, ["nope"])
    with pytest.raises(ValueError, match="no generated step"):
        resimulate(Recording("r2", "verl", None, 3, [], cluster), ["heddle"])
    with pytest.raises(ValueError, match="unknown predictor"):
        choose_predictor("", "psychic")
    assert choose_predictor("learned-v2", None)[1].startswith("default (the recorded 'learned-v2'")
    assert resimulate(recording, ["heddle"]).to_json()["simulated_over_recorded"] is None
