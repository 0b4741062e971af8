"""A submission the control plane dead-lettered (pure deciders): its trajectory ends failed
with the reason, the rollout's other trajectories are placed and it finishes; a dead letter of a
submission the control plane did read (another consumer's) changes nothing."""

from __future__ import annotations

import events_factory as b

from heddle.control.placement import PlacementDecider, PresortedPlacer
from heddle.control.rollout import RolloutDecider
from heddle.events import DeadLettered, Event, Failed, RolloutFinished, StartTrajectory
from heddle.policy.cost.model import preset


def dead_letter(
    traj_id: str, consumer: str = "control-plane", role: str = "control_plane"
) -> DeadLettered:
    return DeadLettered(
        event_id=f"dl:{traj_id}:{consumer}", rollout_id="r1", occurred_at=3.0, consumer=consumer,
        subject=f"heddle.evt.traj.r1.{traj_id}.submitted", stream_sequence=7,
        reason="event: invalid message: Expected `int`, got `str` - at `$.spec.max_steps`",
        role=role,
    )  # fmt: skip


def test_a_dead_lettered_submission_ends_its_trajectory_and_the_rollout_finishes() -> None:
    decider = RolloutDecider()
    for event in (b.rollout(3), b.submitted("t000000", 0), b.submitted("t000002", 2)):
        assert decider.decide(event) == []
    (failed,) = decider.decide(dead_letter("t000001"))
    assert isinstance(failed, Failed) and failed.is_final and failed.finish_reason == "error"
    assert failed.traj_id == "t000001" and failed.index == 1
    assert "could not be read" in failed.reason and "max_steps" in failed.reason
    assert decider.decide(dead_letter("t000001", "control-plane-2")) == []  # once
    assert decider.decide(failed) == []
    decider.decide(b.completed("t000000", 1, 5))
    (finished,) = decider.decide(b.completed("t000002", 1, 5))
    assert isinstance(finished, RolloutFinished)
    assert (finished.num_completed, finished.num_failed) == (2, 1)


def test_a_dead_letter_of_a_submission_the_control_plane_read_changes_nothing() -> None:
    decider = RolloutDecider()
    decider.decide(b.rollout(1))
    decider.decide(b.submitted("t000000", 0))
    assert decider.decide(dead_letter("t000000", "ledger", "ledger_projector")) == []
    other = DeadLettered(event_id="x", rollout_id="r1", occurred_at=1.0, consumer="c",
                         subject="heddle.evt.traj.r1.t000000.generated", stream_sequence=1,
                         reason="bad")  # fmt: skip
    assert decider.decide(other) == []
    # A refused second submission of the rollout itself (the gate's dead letter): no trajectory.
    rollout_letter = DeadLettered(event_id="y", rollout_id="r1", occurred_at=1.0, consumer="c",
                                  subject="heddle.evt.rollout.r1.submitted", stream_sequence=2,
                                  reason="refused: rollout r1 was submitted already")  # fmt: skip
    assert decider.decide(rollout_letter) == []


def test_the_placement_does_not_wait_for_a_trajectory_that_was_never_submitted() -> None:
    decider = PlacementDecider(lambda: PresortedPlacer(lambda tp: preset("qwen3-8b"), hysteresis=0))
    opening: list[Event] = [
        b.worker("w0"),
        b.rollout(3),
        b.submitted("t0", 0),
        b.submitted("t2", 2),
    ]
    opening += [b.predicted("t0", -1, 100.0), b.predicted("t2", -1, 200.0)]
    outputs = [o for e in opening for o in decider.decide(e)]
    assert outputs == []  # waiting for t1
    refused = Failed(event_id="f", rollout_id="r1", occurred_at=3.0, traj_id="t1", step=0,
                     reason="its submission could not be read")  # fmt: skip
    started = {o.traj_id for o in decider.decide(refused) if isinstance(o, StartTrajectory)}
    assert started == {"t0", "t2"}
