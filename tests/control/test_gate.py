"""The event gate: each rule refuses what it should and passes a clean history."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from heddle.control.gate import EventGate, Verdict
from heddle.events import (
    Completed,
    DeadLettered,
    Event,
    Failed,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    Migrated,
    Predicted,
    RolloutCancelled,
    RolloutFinished,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectoryAbortRequested,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
)

R = "r1"


def rollout(num: int = 2, *, policy: str = "heddle", trainer: str = "grpo") -> RolloutSubmitted:
    return RolloutSubmitted(
        event_id=f"{R}:submitted",
        rollout_id=R,
        occurred_at=0.0,
        policy=policy,
        num_trajectories=num,
        trainer=trainer,
    )


def submitted(traj: str = "t0", index: int = 0, **spec: Any) -> TrajectorySubmitted:
    return TrajectorySubmitted(
        event_id=f"{R}:{traj}:submitted",
        rollout_id=R,
        occurred_at=0.0,
        traj_id=traj,
        spec=TrajectorySpec(group_id="g", index=index, environment="trace", **spec),
    )


def placed(worker: str, epoch: int, traj: str = "t0") -> TrajectoryPlaced:
    return TrajectoryPlaced(
        event_id=f"{R}:{traj}:{epoch}:placed",
        rollout_id=R,
        occurred_at=0.0,
        traj_id=traj,
        worker_id=worker,
        epoch=epoch,
    )


def started(step: int, worker: str = "w0", epoch: int = 1, traj: str = "t0") -> GenerationStarted:
    return GenerationStarted(
        event_id=f"{R}:{traj}:{step}:{epoch}:started",
        rollout_id=R,
        occurred_at=0.0,
        traj_id=traj,
        step=step,
        worker_id=worker,
        num_context_tokens=1,
        epoch=epoch,
    )


def generated(step: int, worker: str = "w0", epoch: int = 1, traj: str = "t0") -> Generated:
    return Generated(
        event_id=f"{R}:{traj}:{step}:{epoch}:generated",
        rollout_id=R,
        occurred_at=0.0,
        traj_id=traj,
        step=step,
        worker_id=worker,
        output_token_ids=[1],
        epoch=epoch,
    )


def called(step: int, worker: str = "w0", epoch: int = 1, traj: str = "t0") -> ToolCalled:
    return ToolCalled(
        event_id=f"{R}:{traj}:{step}:{epoch}:called",
        rollout_id=R,
        occurred_at=0.0,
        traj_id=traj,
        step=step,
        worker_id=worker,
        call_id=f"{traj}:{step}:call",
        tool="trace",
        epoch=epoch,
    )


def returned(step: int, traj: str = "t0", call: str | None = None) -> ToolReturned:
    return ToolReturned(
        event_id=f"{R}:{traj}:{step}:returned",
        rollout_id=R,
        occurred_at=0.0,
        traj_id=traj,
        step=step,
        call_id=call or f"{traj}:{step}:call",
        tool="trace",
        status="ok",
    )


def completed(worker: str = "w0", epoch: int = 1, traj: str = "t0", **kw: Any) -> Completed:
    return Completed(
        event_id=f"{R}:{traj}:{epoch}:completed",
        rollout_id=R,
        occurred_at=0.0,
        traj_id=traj,
        num_steps=1,
        worker_id=worker,
        epoch=epoch,
        **kw,
    )


def failed(worker: str = "w0", epoch: int = 1, traj: str = "t0", **kw: Any) -> Failed:
    return Failed(
        event_id=f"{R}:{traj}:{epoch}:failed:{kw}",
        rollout_id=R,
        occurred_at=0.0,
        traj_id=traj,
        step=0,
        reason="x",
        worker_id=worker,
        epoch=epoch,
        **kw,
    )


def finished() -> RolloutFinished:
    return RolloutFinished(event_id=f"{R}:finished", rollout_id=R, occurred_at=0.0, num_completed=2)


def gate_after(*events: Event) -> EventGate:
    gate = EventGate()
    for event in events:
        verdict = gate.admit(event)
        assert verdict.is_accepted, (event, verdict)
    return gate


def reason(verdict: Verdict) -> str:
    assert verdict.refusal is not None, "accepted"
    return verdict.refusal.reason


ONE_STEP = [rollout(), submitted(), placed("w0", 1), started(0), generated(0)]


def test_a_clean_history_passes_and_its_end_is_delivered_to_the_owner() -> None:
    gate = gate_after(*ONE_STEP, called(0), returned(0), started(1), generated(1))
    verdict = gate.admit(completed())
    assert verdict.is_accepted and verdict.deliver_to == "grpo"


@pytest.mark.parametrize("version", [0, 2, 99, -5])
def test_a_schema_version_heddle_does_not_read_is_refused(version: int) -> None:
    unread = msgspec.structs.replace(rollout(), version=version)
    assert "schema version" in reason(EventGate().admit(unread))


@pytest.mark.parametrize(
    ("event", "words"),
    [
        (rollout(num=0), "0 trajectories"),
        (rollout(num=-3), "is negative"),
        (rollout(policy="nope"), "unknown policy"),
        (rollout(trainer="a.b"), "not a valid id"),
    ],
)
def test_a_rollout_that_cannot_run_is_refused(event: RolloutSubmitted, words: str) -> None:
    assert words in reason(EventGate().admit(event))


def test_a_rollout_is_submitted_once() -> None:
    assert "submitted already" in reason(gate_after(rollout()).admit(rollout()))


def test_a_trajectory_must_fit_a_known_open_rollout() -> None:
    assert "unknown rollout" in reason(EventGate().admit(submitted()))
    gate = gate_after(rollout(num=1), submitted())
    assert "submitted already" in reason(gate.admit(submitted()))
    assert "has all its 1" in reason(gate.admit(submitted("t9", 0)))
    assert "beyond" in reason(gate_after(rollout(num=1)).admit(submitted("t5", 5)))
    assert "max_steps" in reason(gate_after(rollout()).admit(submitted(max_steps=0)))


def test_an_event_of_a_trajectory_never_submitted_is_refused() -> None:
    gate = gate_after(rollout())
    assert "never submitted" in reason(gate.admit(completed(traj="ghost")))
    assert "unknown rollout" in reason(EventGate().admit(completed()))


def test_a_rollout_ends_only_when_its_own_trajectories_did() -> None:
    gate = gate_after(*ONE_STEP, completed())
    assert "1 of its 2" in reason(gate.admit(finished()))
    gate = gate_after(
        *ONE_STEP, completed(), submitted("t1", 1), placed("w0", 1, "t1"), failed(traj="t1")
    )
    assert gate.admit(finished()).deliver_to == "grpo"
    assert "ended already" in reason(gate.admit(finished()))
    cancel = RolloutCancelled(event_id="c", rollout_id=R, occurred_at=0.0)
    assert "ended already" in reason(gate.admit(cancel))


def test_only_the_holder_under_its_hosting_writes_and_a_stale_writer_is_fenced() -> None:
    gate = gate_after(rollout(), submitted(), placed("w0", 1), placed("w1", 2))
    stale = gate.admit(started(0, "w0", 1))
    assert "hosting 1 of worker w0 is stale" in reason(stale)
    assert stale.refusal is not None
    assert (stale.refusal.fenced_worker, stale.refusal.fenced_epoch) == ("w0", 1)
    other = gate.admit(started(0, "w9", 2))
    assert "w1 holds the trajectory under hosting 2" in reason(other) and other.refusal is not None
    assert other.refusal.fenced_worker == "w9"
    assert gate.admit(started(0, "w1", 2)).is_accepted


def interrupted(step: int, worker: str = "w0", epoch: int = 1, n: int = 0) -> GenerationInterrupted:
    return GenerationInterrupted(
        event_id=f"{R}:t0:{step}:{n}:{epoch}:interrupted",
        rollout_id=R,
        occurred_at=0.0,
        traj_id="t0",
        step=step,
        worker_id=worker,
        output_token_ids=[1],
        epoch=epoch,
    )


def test_a_re_shard_hands_an_interrupted_step_to_the_leader_under_a_new_hosting() -> None:
    """A retiring member publishes what its step produced while it holds the hosting (more than
    once if need be); the re-shard's placement on the leader is a new hosting: the leader
    finishes the step, and the member's later writes are stale and fenced."""
    gate = gate_after(
        rollout(), submitted(), placed("w0", 1), started(0), interrupted(0), interrupted(0, n=1)
    )
    assert gate.admit(
        TrajectoryPlaced(**{**msgspec.structs.asdict(placed("w1", 2)), "reason": "reshard"})
    ).is_accepted
    late = gate.admit(interrupted(0, "w0", 1, n=2))
    assert late.refusal is not None and (late.refusal.fenced_worker, late.refusal.fenced_epoch) == (
        "w0",
        1,
    )
    assert gate.admit(interrupted(0, "w1", 2)).is_accepted
    assert gate.admit(generated(0, "w1", 2)).is_accepted
    assert "generated already" in reason(gate.admit(interrupted(0, "w1", 2, n=1)))
    assert "step 1" in reason(gate.admit(interrupted(1, "w1", 2)))


def test_an_older_or_repeated_placement_is_refused() -> None:
    gate = gate_after(rollout(), submitted(), placed("w0", 2))
    assert "not newer" in reason(gate.admit(placed("w1", 2)))
    assert "not newer" in reason(gate.admit(placed("w1", 1)))


def test_a_migration_moves_the_hosting_to_the_target() -> None:
    gate = gate_after(*ONE_STEP, called(0))
    move = Migrated(
        event_id="m",
        rollout_id=R,
        occurred_at=0.0,
        traj_id="t0",
        source_worker_id="w0",
        target_worker_id="w1",
        epoch=1,
        target_epoch=2,
    )
    assert gate.admit(move).is_accepted
    assert gate.admit(returned(0)).is_accepted
    assert "stale" in reason(gate.admit(started(1, "w0", 1)))
    assert gate.admit(started(1, "w1", 2)).is_accepted
    stale_move = msgspec.structs.replace(move, event_id="m2", target_epoch=3)
    assert "stale" in reason(gate.admit(stale_move))


@pytest.mark.parametrize(
    ("event", "words"),
    [
        (started(3), "next step is 1"),
        (generated(0), "generated already"),
        (generated(2), "at step 0"),
        (returned(0), "no call of that step is out"),
        (returned(1), "no call of that step is out"),
    ],
)
def test_a_step_event_out_of_order_is_refused(event: Event, words: str) -> None:
    assert words in reason(gate_after(*ONE_STEP).admit(event))


def test_a_step_starts_once_the_one_before_is_over() -> None:
    assert "before step 0 is over" in reason(gate_after(*ONE_STEP[:-1]).admit(started(1)))
    assert "before step 0 is over" in reason(gate_after(*ONE_STEP, called(0)).admit(started(1)))
    assert gate_after(*ONE_STEP).admit(started(1)).is_accepted  # feedback without a tool


def test_a_tool_result_must_answer_the_call_that_is_out() -> None:
    gate = gate_after(*ONE_STEP, called(0))
    assert "the call out is" in reason(gate.admit(returned(0, call="other")))
    assert gate.admit(returned(0)).is_accepted
    again = msgspec.structs.replace(returned(0), event_id="x")
    assert "returned already" in reason(gate.admit(again))


def test_nothing_of_the_worker_passes_after_the_end_but_decisions_do() -> None:
    gate = gate_after(*ONE_STEP, completed())
    assert "ended already" in reason(gate.admit(completed(reward=999.0, epoch=1)))
    assert "ended already" in reason(gate.admit(failed()))
    assert "ended already" in reason(gate.admit(placed("w1", 5)))
    prediction = Predicted(
        event_id="p",
        rollout_id=R,
        occurred_at=0.0,
        traj_id="t0",
        step=0,
        predicted_remaining_tokens=1.0,
        predictor="x",
    )
    assert gate.admit(prediction).is_accepted


def test_a_retryable_failure_hands_the_trajectory_back_until_placed_again() -> None:
    gate = gate_after(*ONE_STEP, failed(retryable=True))
    assert "not placed" in reason(gate.admit(called(0)))
    assert gate.admit(placed("w1", 2)).is_accepted
    assert gate.admit(called(0, "w1", 2)).is_accepted


def test_a_failure_before_placement_is_the_control_plane_s_only() -> None:
    gate = gate_after(rollout(), submitted())
    assert "not placed" in reason(gate.admit(failed("w3", 0)))
    assert "only the control plane" in reason(gate.admit(failed("", 0)))
    assert gate.admit(abort_requested()).is_accepted
    assert gate.admit(failed("", 0)).deliver_to == "grpo"


def test_a_stale_trajectory_announces_its_resubmission_which_alone_may_follow() -> None:
    gate = gate_after(rollout(num=1), submitted(max_attempts=2), placed("w0", 1))
    wrong = failed(finish_reason="stale", resubmitted_as="t0-r9")
    assert "next attempt is 't0-r1'" in reason(gate.admit(wrong))
    stale = failed(finish_reason="stale", resubmitted_as="t0-r1")
    verdict = gate.admit(stale)
    assert verdict.is_accepted and verdict.deliver_to == ""
    again = submitted("t0-r1", 0, max_attempts=2, attempt=1)
    assert gate.admit(again).is_accepted
    assert "no resubmission" in reason(gate.admit(submitted("t0-r2", 0, max_attempts=3, attempt=2)))
    assert "cannot finish" in reason(gate.admit(finished()))


def test_negative_counts_are_refused() -> None:
    gate = gate_after(*ONE_STEP)
    bad = msgspec.structs.replace(completed(), num_output_tokens=-4)
    assert "num_output_tokens -4 is negative" in reason(gate.admit(bad))


def dead_letter(
    traj: str, subject_kind: str = "submitted", role: str = "control_plane"
) -> DeadLettered:
    return DeadLettered(
        event_id=f"dl:{traj}:{subject_kind}:{role}", rollout_id=R, occurred_at=0.0,
        consumer="control-plane", subject=f"heddle.evt.traj.{R}.{traj}.{subject_kind}",
        stream_sequence=3, reason="event: invalid message", role=role,
    )  # fmt: skip


def abort_requested(traj: str = "t0") -> TrajectoryAbortRequested:
    return TrajectoryAbortRequested(
        event_id=f"{R}:{traj}:abort", rollout_id=R, occurred_at=0.0, traj_id=traj, operator="ops"
    )


def control_plane_failure(traj: str) -> Failed:
    """The control plane's ``Failed`` of a trajectory whose submission it could not read
    (heddle.control.rollout: no worker, final)."""
    return failed(worker="", epoch=0, traj=traj, finish_reason="error")


def test_a_dead_lettered_submission_takes_its_slot_and_its_failure_ends_the_rollout() -> None:
    gate = gate_after(rollout(2), submitted("t0"), placed("w0", 1), dead_letter("t1"))
    assert gate.admit(dead_letter("t1")).is_accepted  # again: nothing more
    assert "all its 2 trajectories" in reason(gate.admit(submitted("t9", 1)))
    assert gate.admit(control_plane_failure("t1")).deliver_to == "grpo"
    assert "cannot finish" in reason(gate.admit(finished()))
    assert gate.admit(completed()).deliver_to == "grpo"
    assert gate.admit(finished()).deliver_to == "grpo"


def test_no_failure_ends_a_slot_without_the_dead_letter_of_its_submission() -> None:
    """A worker may publish a ``failed`` naming no worker; without the submission's dead letter
    it is a forgery that would take a slot of the rollout (and refuse a real trajectory)."""
    gate = gate_after(rollout(2), submitted("t0"))
    assert "never submitted" in reason(gate.admit(control_plane_failure("t1")))
    gate.admit(dead_letter("t1", "generated"))  # a dead letter of another kind: no slot
    assert "never submitted" in reason(gate.admit(control_plane_failure("t1")))
    assert gate.admit(submitted("t1", 1)).is_accepted
