"""The deciders' lean decoders decide nothing differently from full decoding, keep prompt ids
out of the cycle collector, and the consumer's filter subjects cover each family."""

from __future__ import annotations

import gc

import pytest
from control.test_bundle_router import options_for, simulated

from heddle.control.bundle_router import PLACEMENT, BundleRouter
from heddle.controlplane.decider_decoders import decoder_for
from heddle.controlplane.filters import filter_subjects, subjects_of_kind
from heddle.events import (
    DeadLettered,
    Failed,
    Predicted,
    RolloutSubmitted,
    TrajectorySpec,
    TrajectorySubmitted,
    WorkerRegistered,
    encode,
)
from heddle.sim import SimConfig
from heddle.workloads import generate


def test_filter_subjects_cover_each_family() -> None:
    assert subjects_of_kind(Predicted) == ("heddle.evt.traj.*.*.predicted",)
    assert subjects_of_kind(RolloutSubmitted) == ("heddle.evt.rollout.*.submitted",)
    assert subjects_of_kind(WorkerRegistered) == ("heddle.evt.worker.*.registered",)
    # The control plane reads its own dead letters, and a failure on either subject.
    assert subjects_of_kind(DeadLettered) == ("heddle.evt.deadletter.control_plane",)
    # A worker's kind: as stored before writers were named, and under any writer (a worker, or
    # the control plane for its own failure).
    assert subjects_of_kind(Failed) == (
        "heddle.evt.traj.*.*.failed",
        "heddle.evt.traj.*.*.failed.*",
    )
    subjects = filter_subjects([Predicted, Predicted, RolloutSubmitted, Failed])
    assert subjects == (
        "heddle.evt.rollout.*.submitted",
        "heddle.evt.traj.*.*.failed",
        "heddle.evt.traj.*.*.failed.*",
        "heddle.evt.traj.*.*.predicted",
    )


@pytest.mark.parametrize("system", ["heddle", "autellix"])
def test_the_lean_decoder_changes_no_decision(system: str) -> None:
    """Deciders fed events through their stage's lean decoder (token lists counted, not parsed;
    the router's prompt ids as tuples) publish exactly what they publish on fully decoded
    events, byte for byte."""
    trace = generate("coding", 16, seed=5)
    config = SimConfig(model="qwen3-8b", num_gpus=4, seed=1, record_events=True)
    events = simulated(system, trace, config)
    encoded = [encode(event) for event in events]
    full = BundleRouter(options_for(trace, config), first=(PLACEMENT,))
    lean = BundleRouter(options_for(trace, config), first=(PLACEMENT,))
    for full_stage, lean_stage in zip(full.stages, lean.stages, strict=True):
        lean_events = [decoder_for(lean_stage.slot)(data) for data in encoded]
        for event, counted in zip(events, lean_events, strict=True):
            assert type(counted) is type(event)
            if type(event) not in full_stage.handles:
                continue
            published = [encode(output) for output in lean_stage.decide(counted)]
            expected = [encode(output) for output in full_stage.decide(event)]
            assert published == expected, (full_stage.slot, event)


@pytest.mark.parametrize("prompt", [[7, 8, 9], list(range(64))], ids=["plain", "compact"])
def test_the_routers_prompt_ids_leave_the_cycle_collector(prompt: list[int]) -> None:
    """The router keeps every live spec: its prompt ids come as a tuple, which the collector
    stops tracking, and encode as the list they were (heddle.controlplane.decider_decoders), in
    either wire form (short lists stay plain)."""
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
