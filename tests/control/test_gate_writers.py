"""Only the control plane ends what no worker holds: a forged failure naming no worker, and a
dead letter of a role other than the control plane's naming a submission, change nothing (the
subjects they would need are the control plane's alone: tests/deploy/test_permissions.py)."""

from __future__ import annotations

from heddle.control.gate import EventGate
from heddle.control.rollout import RolloutDecider
from heddle.events import Failed

from .test_gate import (
    abort_requested,
    completed,
    control_plane_failure,
    dead_letter,
    failed,
    finished,
    gate_after,
    generated,
    placed,
    reason,
    rollout,
    started,
    submitted,
)


def test_a_failure_naming_no_worker_ends_no_trajectory_waiting_for_placement() -> None:
    gate = gate_after(rollout(2), submitted("t0"), submitted("t1", 1))
    forged = control_plane_failure("t0")
    assert "only the control plane" in reason(gate.admit(forged))
    assert "not placed" in reason(gate.admit(failed("w9", 0)))  # a worker that holds nothing
    # The trajectory runs on as if nothing came: placed, stepped, completed, delivered once.
    for event in (placed("w0", 1), started(0), generated(0)):
        assert gate.admit(event).is_accepted, event
    assert "cannot finish" in reason(gate.admit(finished()))
    assert gate.admit(completed()).deliver_to == "grpo"
    assert "ended already" in reason(gate.admit(forged))


def test_a_failure_naming_no_worker_ends_no_trajectory_a_worker_holds() -> None:
    gate = gate_after(rollout(), submitted(), placed("w0", 1), abort_requested())
    assert "stale" in reason(gate.admit(control_plane_failure("t0")))
    assert gate.admit(failed("w0", 1)).deliver_to == "grpo"  # its holder's own


def test_after_an_abort_request_the_control_plane_fails_an_unplaced_trajectory_once() -> None:
    gate = gate_after(rollout(), submitted(), abort_requested())
    retried = failed("", 0, retryable=True)
    assert "never retried" in reason(gate.admit(retried))
    assert gate.admit(control_plane_failure("t0")).deliver_to == "grpo"
    assert "ended already" in reason(gate.admit(control_plane_failure("t0")))


def test_a_dead_letter_of_another_role_naming_a_submission_changes_nothing() -> None:
    for role in ("worker-w0", "ledger_projector", "tool_executor", "operator", ""):
        gate = gate_after(rollout(2), submitted("t0"), dead_letter("t1", role=role))
        assert "never submitted" in reason(gate.admit(control_plane_failure("t1")))
        assert gate.admit(submitted("t1", 1)).is_accepted, role  # its slot is still free
        assert "cannot finish" in reason(gate.admit(finished()))


def test_only_the_control_planes_dead_letter_of_a_submission_takes_its_slot() -> None:
    gate = EventGate()
    for event in (rollout(2), submitted("t0"), dead_letter("t1", role="control_plane")):
        assert gate.admit(event).is_accepted
    assert "all its 2 trajectories" in reason(gate.admit(submitted("t1", 1)))
    assert gate.admit(control_plane_failure("t1")).deliver_to == "grpo"


def test_the_rollout_decider_fails_a_submission_on_the_control_planes_dead_letter_only() -> None:
    decider = RolloutDecider()
    decider.decide(rollout(2))
    decider.decide(submitted("t0"))
    for role in ("worker-w0", "ledger_projector", ""):
        assert decider.decide(dead_letter("t1", role=role)) == [], role
    (ended,) = decider.decide(dead_letter("t1", role="control_plane"))
    assert isinstance(ended, Failed) and ended.traj_id == "t1"
    assert ended.is_final and not ended.worker_id  # on the control plane's own subject
