"""The output gate drops what would act on a cancelled rollout or a finished trajectory, and
nothing else: checked against a brute-force reading of the events before each output."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from heddle.control import Output
from heddle.control.output_gate import GatedDeciders, OutputGate
from heddle.events import (
    Completed,
    Event,
    Failed,
    MigrationRequested,
    Predicted,
    RolloutCancelled,
    RolloutFinished,
    StartTrajectory,
    TrajectoryPlaced,
    TrajectorySpec,
    WorkerCommand,
    WorkerRegistered,
)

ROLLOUTS = ("r1", "r2")
TRAJECTORIES = ("t0", "t1")
_SPEC = TrajectorySpec(group_id="g", index=0, environment="trace", prompt_token_ids=[1])


def completed(rollout_id: str, traj_id: str) -> Completed:
    return Completed(
        event_id=f"{rollout_id}:{traj_id}:c", rollout_id=rollout_id, occurred_at=1.0,
        traj_id=traj_id, num_steps=1,
    )  # fmt: skip


def failed(rollout_id: str, traj_id: str, *, retryable: bool) -> Failed:
    return Failed(
        event_id=f"{rollout_id}:{traj_id}:f", rollout_id=rollout_id, occurred_at=1.0,
        traj_id=traj_id, step=0, reason="x", retryable=retryable,
    )  # fmt: skip


def cancelled(rollout_id: str) -> RolloutCancelled:
    return RolloutCancelled(event_id=f"{rollout_id}:x", rollout_id=rollout_id, occurred_at=1.0)


def finished(rollout_id: str) -> RolloutFinished:
    return RolloutFinished(
        event_id=f"{rollout_id}:f", rollout_id=rollout_id, occurred_at=1.0, num_completed=1
    )


def predicted(rollout_id: str, traj_id: str) -> Predicted:
    return Predicted(
        event_id=f"{rollout_id}:{traj_id}:p", rollout_id=rollout_id, occurred_at=1.0,
        traj_id=traj_id, step=0, predicted_remaining_tokens=1.0, predictor="x",
    )  # fmt: skip


def placed(rollout_id: str, traj_id: str) -> TrajectoryPlaced:
    return TrajectoryPlaced(
        event_id=f"{rollout_id}:{traj_id}:pl", rollout_id=rollout_id, occurred_at=1.0,
        traj_id=traj_id, worker_id="w0",
    )  # fmt: skip


def migration(rollout_id: str, traj_id: str) -> MigrationRequested:
    return MigrationRequested(
        event_id=f"{rollout_id}:{traj_id}:m", rollout_id=rollout_id, occurred_at=1.0,
        traj_id=traj_id, source_worker_id="w0", target_worker_id="w1",
    )  # fmt: skip


def start(rollout_id: str, traj_id: str) -> StartTrajectory:
    return StartTrajectory(
        command_id=f"{rollout_id}:{traj_id}:s", rollout_id=rollout_id, worker_id="w0",
        issued_at=1.0, traj_id=traj_id, spec=_SPEC,
    )  # fmt: skip


def test_a_cancelled_rollout_gets_no_work_but_its_facts_pass() -> None:
    gate = OutputGate()
    cancel = cancelled("r1")
    work: list[Output] = [start("r1", "t0"), placed("r1", "t0"), migration("r1", "t0")]
    fact = predicted("r1", "t0")
    assert gate.gate(cancel, [*work, fact]) == [fact]  # the cancellation counts at once
    assert gate.gate(predicted("r2", "t0"), [start("r2", "t0")]) == [start("r2", "t0")]


def test_nothing_goes_out_about_a_finished_trajectory_but_its_own_answer() -> None:
    gate = OutputGate()
    end = completed("r1", "t0")
    assert gate.gate(end, [predicted("r1", "t0")]) == [predicted("r1", "t0")]
    assert gate.gate(predicted("r1", "t0"), [predicted("r1", "t0")]) == []
    assert gate.gate(predicted("r1", "t1"), [predicted("r1", "t1")]) == [predicted("r1", "t1")]
    gate.gate(finished("r1"), [])
    assert gate.gate(predicted("r1", "t1"), [start("r1", "t1")]) == []
    rollout_wide = finished("r1")  # an output naming no trajectory is not about one
    assert gate.gate(predicted("r1", "t1"), [rollout_wide]) == [rollout_wide]


def test_a_retried_failure_ends_nothing() -> None:
    gate = OutputGate()
    gate.gate(failed("r1", "t0", retryable=True), [])
    assert gate.gate(predicted("r1", "t0"), [start("r1", "t0")]) == [start("r1", "t0")]
    gate.gate(failed("r1", "t0", retryable=False), [])
    assert gate.gate(predicted("r1", "t0"), [start("r1", "t0")]) == []


_ENDS = st.sampled_from(ROLLOUTS).flatmap(
    lambda r: st.one_of(
        st.just(cancelled(r)),
        st.just(finished(r)),
        st.sampled_from(TRAJECTORIES).map(lambda t: completed(r, t)),
        st.tuples(st.sampled_from(TRAJECTORIES), st.booleans()).map(
            lambda tb: failed(r, tb[0], retryable=tb[1])
        ),
        st.sampled_from(TRAJECTORIES).map(lambda t: predicted(r, t)),
    )
)
_OUTPUT_KINDS = (predicted, placed, migration, start)
_OUTPUTS = st.tuples(
    st.sampled_from(_OUTPUT_KINDS), st.sampled_from(ROLLOUTS), st.sampled_from(TRAJECTORIES)
).map(lambda kind_r_t: kind_r_t[0](kind_r_t[1], kind_r_t[2]))


def reference_allowed(before: list[Event], event: Event, output: Output) -> bool:
    """Brute force: what the events before ``output``'s cause (and the cause itself, for a
    cancellation) say about it."""
    rollout_id, traj_id = output.rollout_id, getattr(output, "traj_id", "")
    cancelled_ = any(
        isinstance(e, RolloutCancelled) and e.rollout_id == rollout_id for e in [*before, event]
    )
    if cancelled_ and isinstance(output, (WorkerCommand, TrajectoryPlaced, MigrationRequested)):
        return False
    ended = any(
        e.rollout_id == rollout_id
        and (
            isinstance(e, RolloutFinished)
            or (isinstance(e, Completed) and e.traj_id == traj_id)
            or (isinstance(e, Failed) and not e.retryable and e.traj_id == traj_id)
        )
        for e in before
    )
    return not ended


@given(st.lists(st.tuples(_ENDS, st.lists(_OUTPUTS, max_size=4)), max_size=30))
def test_the_gate_lets_through_exactly_what_the_history_allows(
    steps: list[tuple[Event, list[Output]]],
) -> None:
    gate = OutputGate()
    before: list[Event] = []
    for event, outputs in steps:
        expected = [o for o in outputs if reference_allowed(before, event, o)]
        assert gate.gate(event, list(outputs)) == expected
        before.append(event)


class _Answers:
    """A decider answering each worker registration and prediction with one output."""

    def __init__(self, name: str, answer: Output) -> None:
        self.name = name
        self.handles = frozenset({Predicted, WorkerRegistered})
        self._answer = answer

    def decide(self, event: Event) -> list[Output]:
        return [self._answer]


def test_gated_deciders_run_in_order_behind_the_gate() -> None:
    first, second = _Answers("a", start("r1", "t0")), _Answers("b", predicted("r1", "t1"))
    gated = GatedDeciders([first, second])
    assert OutputGate.handles <= gated.handles and Predicted in gated.handles
    assert gated.decide(predicted("r1", "t0")) == [start("r1", "t0"), predicted("r1", "t1")]
    assert gated.decide(completed("r1", "t0")) == []  # no decider handles it; the gate folds it
    assert gated.decide(predicted("r1", "t0")) == [predicted("r1", "t1")]
