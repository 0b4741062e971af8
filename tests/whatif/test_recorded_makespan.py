"""The recorded makespan that what-if compares with is in model seconds, also for time-scaled
live runs (sim engines at ``time_scale`` x real time)."""

from __future__ import annotations

import pytest

from heddle.control.rollout import RolloutDecider
from heddle.events import (
    Completed,
    RolloutFinished,
    RolloutSubmitted,
    TrajectorySpec,
    TrajectorySubmitted,
)


@pytest.mark.parametrize("time_scale", [1.0, 50.0])
def test_rollout_finished_reports_model_seconds(time_scale: float) -> None:
    decider = RolloutDecider()
    submitted = RolloutSubmitted(
        event_id="s",
        rollout_id="r",
        occurred_at=1000.0,
        policy="heddle",
        num_trajectories=1,
        time_scale=time_scale,
    )
    assert decider.decide(submitted) == []
    spec = TrajectorySpec(group_id="g", index=0, environment="trace")
    submitted_trajectory = TrajectorySubmitted(
        event_id="t", rollout_id="r", occurred_at=1000.0, traj_id="t000000", spec=spec
    )
    assert decider.decide(submitted_trajectory) == []
    done = Completed(
        event_id="c",
        rollout_id="r",
        occurred_at=1002.5,
        traj_id="t000000",
        num_steps=1,
        num_output_tokens=7,
    )
    [finished] = decider.decide(done)
    assert isinstance(finished, RolloutFinished)
    assert finished.makespan_s == pytest.approx(2.5 * time_scale)
    assert finished.num_output_tokens == 7
