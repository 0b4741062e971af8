"""The live oracle: per-rollout traces under repeated trajectory ids, the simulator's noise, and
the fallback for trajectories without a trace."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.prediction import (
    NoisyOraclePredictor,
    OraclePredictor,
    Outcome,
    PredictorOptions,
    Progress,
    progress_of,
)
from heddle.policy.prediction.online import OnlinePredictor
from heddle.policy.prediction.trace_oracle import LiveOracle
from heddle.traces import TraceStep, TraceTrajectory


def trace(outputs: list[int], traj_id: str = "t000000") -> TraceTrajectory:
    steps = [TraceStep(output_tokens=n, tool_s=1.0, tool_output_tokens=5) for n in outputs]
    return TraceTrajectory(id=traj_id, group="g", prompt_tokens=10, steps=steps)


def test_rollouts_reusing_trajectory_ids_get_their_own_truth() -> None:
    live = LiveOracle(OnlinePredictor())
    live.oracle.add("r1", "t000000", trace([10, 20]))
    live.oracle.add("r2", "t000000", trace([1000, 2000, 3000]))
    live.oracle.scope("r1")
    assert live.predict(Progress("t000000", "g", 10)) == 30
    live.oracle.scope("r2")
    assert live.predict(Progress("t000000", "g", 10, num_steps=1, output_tokens=1000)) == 5000
    live.oracle.forget("r2", "t000000")
    assert not live.oracle.knows("r2", "t000000")
    assert live.oracle.knows("r1", "t000000")


def test_trajectories_without_a_trace_ask_the_fallback_which_learns() -> None:
    fallback = OnlinePredictor()
    live = LiveOracle(fallback)
    live.oracle.scope("r1")
    assert live.predict(Progress("t000009", "g", 10)) == fallback.config.prior_total_tokens
    live.observe(Outcome("t000009", "g", 10, (5, 5)))
    assert fallback.num_samples == 1  # the one prediction it made, with its true remaining


@settings(max_examples=40)
@given(
    outputs=st.lists(st.integers(0, 4000), min_size=1, max_size=6),
    sigma=st.floats(0, 1.5),
    seed=st.integers(0, 100),
)
def test_noise_matches_the_simulators_noisy_oracle(
    outputs: list[int], sigma: float, seed: int
) -> None:
    t = trace(outputs)
    options = PredictorOptions(seed=seed, sigma=sigma)
    simulated = NoisyOraclePredictor(OraclePredictor({t.id: t}), options)
    live = LiveOracle(OnlinePredictor(), options)
    live.oracle.add("r", t.id, t)
    live.oracle.scope("r")
    for k in range(len(outputs) + 1):
        progress = progress_of(t, k)
        assert live.predict(progress) == simulated.predict(progress)
        assert live.predict_tool_s(progress) == simulated.predict_tool_s(progress)
