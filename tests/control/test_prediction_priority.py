"""The prediction and priority deciders: what they emit for each fact, and what they ignore."""

from __future__ import annotations

import events_factory as b
import pytest
from msgspec.structs import replace

from heddle.control.prediction import PredictionDecider
from heddle.control.priority import PriorityConfig, PriorityDecider
from heddle.events import Predicted, Prioritized, Reprioritize, TrajectoryPlaced
from heddle.policy.prediction import Outcome, PredictorOptions, Progress, make_predictor
from heddle.policy.scheduling.priority import priority_policy
from heddle.traces import TraceStep, TraceTrajectory


def oracle_decider() -> PredictionDecider:
    trace = TraceTrajectory(
        id="t0",
        prompt_tokens=100,
        steps=[TraceStep(output_tokens=n, tool_s=1.0, tool_output_tokens=10) for n in (30, 20, 5)],
    )
    return PredictionDecider(make_predictor("oracle", PredictorOptions(trace={"t0": trace})))


def test_prediction_decider_predicts_at_submission_and_at_each_tool_call() -> None:
    decider = oracle_decider()
    (first,) = decider.decide(b.submitted("t0", 0))
    assert isinstance(first, Predicted)
    assert (first.step, first.predicted_remaining_tokens, first.num_context_tokens) == (-1, 55, 100)
    assert first.event_id == "r1:t0:-1:predicted" and first.predictor == "oracle"
    assert decider.decide(b.generated("t0", 0, 30)) == []
    (second,) = decider.decide(b.tool_called("t0", 0, at=4.0))
    assert isinstance(second, Predicted)
    assert (second.step, second.predicted_remaining_tokens, second.occurred_at) == (0, 25, 4.0)
    assert decider.decide(b.tool_returned("t0", 0, tokens=10)) == []
    decider.decide(b.generated("t0", 1, 20))
    (third,) = decider.decide(b.tool_called("t0", 1))
    assert isinstance(third, Predicted)
    assert third.predicted_remaining_tokens == 5 and third.num_context_tokens == 160


def test_predictions_carry_the_remaining_tool_time() -> None:
    decider = oracle_decider()  # three steps, 1 s tool calls after the first two
    (first,) = decider.decide(b.submitted("t0", 0))
    assert isinstance(first, Predicted) and first.predicted_remaining_tool_s == 2.0
    decider.decide(b.generated("t0", 0, 30))
    (second,) = decider.decide(b.tool_called("t0", 0))
    assert isinstance(second, Predicted) and second.predicted_remaining_tool_s == 2.0  # in flight
    decider.decide(b.tool_returned("t0", 0, tokens=10))
    decider.decide(b.generated("t0", 1, 20))
    (third,) = decider.decide(b.tool_called("t0", 1))
    assert isinstance(third, Predicted) and third.predicted_remaining_tool_s == 1.0


def test_completions_teach_the_predictor_each_step_s_tool_figures() -> None:
    seen: list[Outcome] = []

    class Recording:
        name = "recording"

        def predict(self, progress: Progress) -> float:
            return 0.0

        def observe(self, outcome: Outcome) -> None:
            seen.append(outcome)

    decider = PredictionDecider(Recording())
    decider.decide(b.submitted("t0", 0))
    for step, tokens in enumerate((30, 20)):
        decider.decide(b.generated("t0", step, tokens))
        decider.decide(b.tool_called("t0", step))
        decider.decide(b.tool_returned("t0", step, tokens=7 + step))
    decider.decide(b.generated("t0", 2, 5))
    decider.decide(b.completed("t0", 3, 55))
    (outcome,) = seen
    assert outcome.step_output_tokens == (30, 20, 5)
    assert outcome.step_tool_output_tokens == (7, 8, 0)
    assert len(outcome.step_tool_s) == 3 and outcome.step_tool_s[-1] == 0.0


def test_prediction_decider_ignores_duplicates_and_strangers() -> None:
    decider = oracle_decider()
    decider.decide(b.submitted("t0", 0))
    assert decider.decide(b.submitted("t0", 0)) == []
    decider.decide(b.generated("t0", 0, 30))
    before = decider.snapshot()
    assert decider.decide(b.generated("t0", 0, 30)) == []  # redelivered
    assert decider.decide(b.tool_called("t0", 3)) == []  # a step it has not seen
    assert decider.decide(b.generated("nobody", 0, 5)) == []
    assert decider.snapshot() == before


def test_history_predictor_learns_from_completed_trajectories() -> None:
    decider = PredictionDecider(make_predictor("history", PredictorOptions(prior_total_tokens=7)))
    decider.decide(b.submitted("a", 0))
    decider.decide(b.generated("a", 0, 40))
    decider.decide(b.tool_called("a", 0))
    decider.decide(b.tool_returned("a", 0))
    decider.decide(b.generated("a", 1, 60))
    decider.decide(b.completed("a", 2, 100))
    (prediction,) = decider.decide(b.submitted("b", 1))
    assert isinstance(prediction, Predicted)
    assert prediction.predicted_remaining_tokens == 100  # what "a" needed from step 0


def placed(traj_id: str, worker_id: str) -> TrajectoryPlaced:
    return TrajectoryPlaced(
        event_id=f"{traj_id}:placed",
        rollout_id=b.ROLLOUT,
        occurred_at=0.0,
        traj_id=traj_id,
        worker_id=worker_id,
    )


def test_pps_prioritises_by_prediction_with_hysteresis() -> None:
    config = PriorityConfig(min_relative_change=0.1, seconds_per_token=1.0)
    decider = PriorityDecider(priority_policy("pps"), config)
    (first,) = decider.decide(b.submitted("t0", 0))
    assert isinstance(first, Prioritized) and first.priority == 0.0
    decider.decide(placed("t0", "w3"))
    out = decider.decide(b.predicted("t0", -1, 1000.0))
    assert [type(o) for o in out] == [Prioritized, Reprioritize]  # generating: tell the worker
    assert isinstance(out[1], Reprioritize) and (out[1].worker_id, out[1].priority) == ("w3", 1000)
    assert decider.decide(b.predicted("t0", -1, 1050.0)) == []  # within 10%
    decider.decide(b.tool_called("t0", 0))
    out = decider.decide(b.predicted("t0", 0, 500.0))
    assert [type(o) for o in out] == [Prioritized]  # in a tool gap: no command
    assert decider.priority_of(b.ROLLOUT, "t0") == 500.0


def test_fcfs_keeps_submission_order_among_simultaneous_trajectories() -> None:
    decider = PriorityDecider(priority_policy("fcfs"))
    priorities = []
    for index in range(3):
        (event,) = decider.decide(b.submitted(f"t{index}", index))
        assert isinstance(event, Prioritized)
        priorities.append(event.priority)
    assert priorities[0] > priorities[1] > priorities[2]


def test_round_robin_sends_a_returning_step_to_the_back() -> None:
    decider = PriorityDecider(priority_policy("round_robin"))
    decider.decide(b.submitted("t0", 0, at=0.0))
    decider.decide(b.submitted("t1", 1, at=0.0))
    (event,) = decider.decide(b.tool_returned("t0", 0, at=5.0))
    assert isinstance(event, Prioritized) and event.priority == -5.0
    assert decider.priority_of(b.ROLLOUT, "t1") == 0.0


def test_plas_lowers_priority_with_attained_service() -> None:
    decider = PriorityDecider(priority_policy("plas"))
    decider.decide(b.submitted("t0", 0))
    (event,) = decider.decide(b.generated("t0", 0, 30))
    # 2.5 engine seconds: Autellix's multi-level queue puts it in the [2, 4) s level.
    assert isinstance(event, Prioritized) and event.priority == pytest.approx(-2.0)
    decider.decide(b.completed("t0", 1, 30))
    assert decider.priority_of(b.ROLLOUT, "t0") is None


def test_a_placed_generating_trajectory_is_told_its_current_priority() -> None:
    """The router stamps a request with the priority it last read; the rollout's first
    predictions are prioritised while it places the rollout, so the worker is told."""
    decider = PriorityDecider(priority_policy("pps"), PriorityConfig(seconds_per_token=1.0))
    decider.decide(b.submitted("t0", 0))
    decider.decide(b.predicted("t0", -1, 1000.0))  # not placed yet: no command
    (command,) = decider.decide(placed("t0", "w3"))
    assert isinstance(command, Reprioritize)
    assert (command.worker_id, command.traj_id, command.priority) == ("w3", "t0", 1000.0)
    assert command.command_id == decider.decide(placed("t0", "w3"))[0].command_id  # replayable
    decider.decide(b.tool_called("t0", 0))
    assert decider.decide(placed("t0", "w4")) == []  # in a tool gap: the next request will carry it


def test_pps_ranks_by_remaining_time_at_the_measured_pace() -> None:
    """Tokens count at the rollout's measured seconds per token (the prior until enough are
    seen), tool seconds as they are."""
    config = PriorityConfig(seconds_per_token=0.01, min_measured_tokens=100)
    decider = PriorityDecider(priority_policy("pps"), config)
    for traj_id in ("talker", "tester"):
        decider.decide(b.submitted(traj_id, 0))
    decider.decide(replace(b.predicted("talker", -1, 5000.0), predicted_remaining_tool_s=10.0))
    decider.decide(replace(b.predicted("tester", -1, 1000.0), predicted_remaining_tool_s=70.0))
    assert decider.priority_of(b.ROLLOUT, "talker") == pytest.approx(60.0)
    assert decider.priority_of(b.ROLLOUT, "tester") == pytest.approx(80.0)  # tools: more to go
    # 200 tokens in 10 s: 0.05 s per token from now on; its 10 engine seconds count against
    # it (the others waited meanwhile: PPS ages by all time waited).
    decider.decide(replace(b.generated("talker", 0, 200), prefill_s=0.0, decode_s=10.0))
    assert decider.priority_of(b.ROLLOUT, "talker") == pytest.approx(5000 * 0.05 + 10 - 10)


def test_pps_counts_engine_and_tool_seconds_against_a_trajectory() -> None:
    """Two trajectories submitted together: one that spent 2.5 engine seconds and a 1-second
    tool call gives up 3.5 s of priority to one that waited all along (its requests are
    stamped once; they need no update while they wait)."""
    decider = PriorityDecider(priority_policy("pps"), PriorityConfig(seconds_per_token=1.0))
    for traj_id in ("served", "waiting"):
        decider.decide(b.submitted(traj_id, 0))
        decider.decide(b.predicted(traj_id, -1, 100.0))
    decider.decide(b.generated("served", 0, 30))  # prefill 0.5 s + decode 2.0 s
    decider.decide(b.tool_called("served", 0))
    decider.decide(b.tool_returned("served", 0))  # 1.0 s
    decider.decide(b.predicted("served", 0, 100.0))
    assert decider.priority_of(b.ROLLOUT, "served") == pytest.approx(100.0 - 3.5)
    assert decider.priority_of(b.ROLLOUT, "waiting") == pytest.approx(100.0)
