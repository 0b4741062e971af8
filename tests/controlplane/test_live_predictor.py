"""The control plane's predictor: the oracle learns each trace trajectory's truth from its
submission and forgets it at the end; earlier rollouts come back from the ledger as trace lines
with their tool figures; the config refuses unknown predictors."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from heddle.controlplane.ledger_history import ledger_history
from heddle.controlplane.live_predictor import PredictionHooks, PredictorConfig, trace_of_task
from heddle.events import (
    Completed,
    Event,
    EventT,
    Generated,
    GenerationStarted,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
)
from heddle.ledger import LedgerWriter, open_ledger
from heddle.policy.prediction import Progress
from heddle.sim import SimConfig
from heddle.traces import TraceStep, TraceTrajectory


def trace_line(outputs: list[int]) -> TraceTrajectory:
    steps = [TraceStep(output_tokens=n, tool_s=1.0, tool_output_tokens=4) for n in outputs]
    return TraceTrajectory(id="x", group="g", prompt_tokens=3, steps=steps)


def submitted(rollout_id: str, trace: TraceTrajectory, environment: str = "trace") -> Event:
    spec = TrajectorySpec(
        group_id="g",
        index=0,
        environment=environment,
        task=msgspec.to_builtins(trace),
        prompt_token_ids=[1, 2, 3],
    )
    return TrajectorySubmitted(
        event_id=f"{rollout_id}:s", rollout_id=rollout_id, occurred_at=0.0, traj_id="t0", spec=spec
    )


def test_the_oracle_learns_traces_at_submission_and_forgets_them_at_the_end() -> None:
    hooks = PredictionHooks(PredictorConfig("oracle"))
    for rollout_id, outputs in (("r1", [10, 20]), ("r2", [100, 200, 300])):
        hooks.before(submitted(rollout_id, trace_line(outputs)))
    hooks.before(submitted("r1", trace_line([1])))  # already known: the first submission counts
    progress = Progress("t0", "g", 3)
    hooks.before(Completed(event_id="c", rollout_id="r2", occurred_at=1, traj_id="t0", num_steps=1))
    assert hooks.predictor.predict(progress) == 600
    hooks.after(Completed(event_id="c", rollout_id="r2", occurred_at=1, traj_id="t0", num_steps=3))
    assert hooks.oracle is not None and not hooks.oracle.oracle.knows("r2", "t0")
    hooks.before(Completed(event_id="c", rollout_id="r1", occurred_at=1, traj_id="t0", num_steps=1))
    assert hooks.predictor.predict(progress) == 30


def test_noisy_oracle_defaults_are_the_simulators() -> None:
    config, sim = PredictorConfig(), SimConfig()
    assert (config.sigma, config.sigma_decay, config.step_correlation) == (
        sim.predictor_sigma,
        sim.predictor_sigma_decay,
        sim.predictor_step_correlation,
    )
    with pytest.raises(ValueError, match="unknown predictor"):
        PredictorConfig("psychic")


def test_a_task_that_is_no_trace_is_refused_quietly() -> None:
    assert trace_of_task({"question": "?"}) is None
    assert trace_of_task(msgspec.to_builtins(trace_line([5]))) == trace_line([5])


def recorded_rollout(rollout_id: str) -> list[EventT]:
    spec = TrajectorySpec(group_id="g7", index=0, environment="trace", prompt_token_ids=[1] * 9)
    events: list[EventT] = [
        RolloutSubmitted(
            event_id=f"{rollout_id}:s",
            rollout_id=rollout_id,
            occurred_at=0.0,
            policy="heddle",
            num_trajectories=1,
        ),
        TrajectorySubmitted(
            event_id=f"{rollout_id}:t:s",
            rollout_id=rollout_id,
            occurred_at=0,
            traj_id="t0",
            spec=spec,
        ),
        TrajectoryPlaced(
            event_id=f"{rollout_id}:t:p", rollout_id=rollout_id, occurred_at=0, traj_id="t0",
            worker_id="w0",
        ),
    ]  # fmt: skip
    for step, (out, tool_tokens) in enumerate([(5, 2), (7, 0)]):
        common = {"rollout_id": rollout_id, "traj_id": "t0", "step": step}
        events.append(
            GenerationStarted(
                event_id=f"{rollout_id}:{step}:gs",
                occurred_at=step,
                worker_id="w0",
                num_context_tokens=9,
                **common,  # type: ignore[arg-type]
            )
        )
        events.append(
            Generated(
                event_id=f"{rollout_id}:{step}:g",
                occurred_at=step,
                worker_id="w0",
                output_token_ids=[1] * out,
                **common,  # type: ignore[arg-type]
            )
        )
        if tool_tokens:
            events.append(
                ToolCalled(
                    event_id=f"{rollout_id}:{step}:tc",
                    occurred_at=step + 0.25,
                    worker_id="w0",
                    call_id="c",
                    tool="trace",
                    **common,  # type: ignore[arg-type]
                )
            )
            events.append(
                ToolReturned(
                    event_id=f"{rollout_id}:{step}:tr",
                    occurred_at=step + 0.5,
                    call_id="c",
                    tool="trace",
                    status="ok",
                    output_token_ids=[0] * tool_tokens,
                    duration_s=2.5,
                    **common,  # type: ignore[arg-type]
                )
            )
    events.append(
        Completed(
            event_id=f"{rollout_id}:t:c",
            rollout_id=rollout_id,
            occurred_at=3,
            traj_id="t0",
            num_steps=2,
            num_output_tokens=12,
            worker_id="w0",
        )
    )
    return events


def test_earlier_rollouts_come_back_from_the_ledger(tmp_path: Path) -> None:
    ledger = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        writer = LedgerWriter(ledger, "test")
        events = recorded_rollout("old") + recorded_rollout("seen")
        writer.project(list(enumerate(events, start=1)))
        history = ledger_history(ledger, exclude_rollouts={"seen"})
    finally:
        ledger.close()
    (trace,) = history
    assert trace.group == "g7" and trace.prompt_tokens == 9
    assert [s.output_tokens for s in trace.steps] == [5, 7]
    assert [s.tool_output_tokens for s in trace.steps] == [2, 0]
    assert trace.steps[0].tool_s == 2.5
    hooks = PredictionHooks()
    assert hooks.learn_history(history) == 1 and hooks.online.num_samples == 2
