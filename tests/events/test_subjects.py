"""Where who wrote an event matters, its subject names the writer's role: a worker's events of a
trajectory name the worker, a failure naming no worker is the control plane's, on a subject no
worker may publish, and each role dead-letters on its own subject; a message on another subject is
refused (``subject_mismatch``)."""

from __future__ import annotations

import pytest

from heddle.controlplane.projector_gaps import subject_matches
from heddle.events import DeadLettered, Failed, Generated, Migrated, WeightsLoaded
from heddle.events.subjects import (
    DEADLETTER_SUBJECT,
    deadletter_subject,
    parse_subject,
    subject_for_event,
    subject_mismatch,
    trajectory_subjects,
    weights_subjects,
)


def failure(worker_id: str) -> Failed:
    return Failed(
        event_id="f1", rollout_id="r1", traj_id="t1", occurred_at=1.0, step=0, reason="x",
        worker_id=worker_id,
    )  # fmt: skip


def letter(role: str) -> DeadLettered:
    return DeadLettered(
        event_id="d1", rollout_id="r1", occurred_at=1.0, consumer="c", stream_sequence=3,
        subject="heddle.evt.traj.r1.t1.submitted", reason="bad", role=role,
    )  # fmt: skip


def generated(worker_id: str) -> Generated:
    return Generated(
        event_id="g1", rollout_id="r1", traj_id="t1", occurred_at=1.0, step=0, output_token_ids=[],
        worker_id=worker_id,
    )  # fmt: skip


def moved(source: str) -> Migrated:
    return Migrated(
        event_id="m1", rollout_id="r1", traj_id="t1", occurred_at=1.0, source_worker_id=source,
        target_worker_id="w9",
    )  # fmt: skip


def test_a_workers_event_is_on_a_subject_that_names_the_worker() -> None:
    assert subject_for_event(generated("w0")) == "heddle.evt.traj.r1.t1.generated.worker-w0"
    assert subject_for_event(failure("w0")) == "heddle.evt.traj.r1.t1.failed.worker-w0"
    assert subject_for_event(moved("w3")) == "heddle.evt.traj.r1.t1.migrated.worker-w3"
    parts = parse_subject("heddle.evt.traj.r1.t1.generated.worker-w0")
    assert (parts.family, parts.kind, parts.traj_id, parts.sent_by) == (
        "traj", "generated", "t1", "worker-w0",
    )  # fmt: skip
    for event in (generated("w0"), moved("w3")):
        kind = type(event).kind_name()
        assert any(
            subject_matches(subject_for_event(event), s)
            for s in trajectory_subjects("r1", "*", kind)
        )


def test_an_event_in_another_workers_name_is_refused() -> None:
    """Worker w1's credential may publish only under worker-w1: an event it writes naming w0
    does not belong there."""
    assert subject_mismatch("heddle.evt.traj.r1.t1.generated.worker-w1", generated("w0"))
    assert subject_mismatch("heddle.evt.traj.r1.t1.migrated.worker-w1", moved("w0"))
    assert subject_mismatch("heddle.evt.traj.r1.t1.generated.worker-w0", generated("w0")) is None


def test_a_workers_event_stored_before_writers_were_named_is_read_as_before() -> None:
    assert subject_mismatch("heddle.evt.traj.r1.t1.generated", generated("w0")) is None
    assert subject_mismatch("heddle.evt.traj.r1.t1.failed", failure("w0")) is None
    assert subject_mismatch("heddle.evt.traj.r1.t2.generated", generated("w0"))


def test_a_workers_weight_report_names_the_worker() -> None:
    loaded = WeightsLoaded(event_id="l1", occurred_at=1.0, weight_version=3, worker_id="w0")
    own = "heddle.evt.weights.3.loaded.worker-w0"
    assert subject_for_event(loaded) == own
    assert parse_subject(own).sent_by == "worker-w0"
    assert subject_mismatch("heddle.evt.weights.3.loaded.worker-w1", loaded)
    assert subject_mismatch("heddle.evt.weights.3.loaded", loaded) is None  # stored before
    assert any(subject_matches(own, s) for s in weights_subjects("*", "loaded"))


def test_a_failure_naming_no_worker_is_on_the_control_planes_subject() -> None:
    own = subject_for_event(failure(""))
    assert own == "heddle.evt.traj.r1.t1.failed.control_plane"
    parts = parse_subject(own)
    assert (parts.family, parts.kind, parts.traj_id, parts.sent_by) == (
        "traj", "failed", "t1", "control_plane",
    )  # fmt: skip
    assert all(
        any(
            subject_matches(subject_for_event(failure(w)), s)
            for s in trajectory_subjects("r1", "*", "failed")
        )
        for w in ("w0", "")
    )


def test_a_failure_naming_no_worker_on_a_workers_subject_is_refused() -> None:
    for subject in ("heddle.evt.traj.r1.t1.failed", "heddle.evt.traj.r1.t1.failed.worker-w0"):
        refusal = subject_mismatch(subject, failure(""))
        assert refusal is not None and "failed.control_plane" in refusal
    assert subject_mismatch("heddle.evt.traj.r1.t1.failed.control_plane", failure("w0"))


def test_each_role_dead_letters_on_its_own_subject() -> None:
    assert subject_for_event(letter("worker-w0")) == "heddle.evt.deadletter.worker-w0"
    assert subject_for_event(letter("control_plane")) == deadletter_subject("control_plane")
    assert parse_subject("heddle.evt.deadletter.worker-w0").sent_by == "worker-w0"
    assert subject_mismatch("heddle.evt.deadletter.worker-w0", letter("control_plane"))
    assert subject_mismatch("heddle.evt.deadletter", letter("control_plane"))
    assert subject_matches("heddle.evt.deadletter.ledger_projector", DEADLETTER_SUBJECT)
    # Written before roles were named: read as it was stored, claiming no role.
    assert subject_mismatch("heddle.evt.deadletter", letter("")) is None
    with pytest.raises(ValueError, match="role"):
        subject_for_event(letter("a.b"))
