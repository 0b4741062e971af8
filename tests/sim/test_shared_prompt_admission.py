"""Heddle's KV admission on a GRPO group that shares a long prompt: where the engine holds the
prompt once (the ``sglang`` engine model), the group is not held back for copies it never makes
(issue 36: 17.1 s, 11.7 s of it held by admission, against 7.7 s with no admission)."""

from __future__ import annotations

from heddle.experiments.kv_pressure import scaled_config
from heddle.sim import SimConfig, simulate
from heddle.traces import TraceStep, TraceTrajectory


def test_a_group_on_a_shared_prompt_is_not_held_for_copies_the_engine_never_makes() -> None:
    """16 samples of a 6,000-token prompt on one Qwen3-8B worker holding ~37k KV tokens: the
    prompt plus every sample's own tokens fit, so heddle starts them all at once and finishes
    with heddle-no-admission."""
    trace = [
        TraceTrajectory(
            id=f"s{i}",
            group="g",
            prompt_tokens=6000,
            steps=[TraceStep(output_tokens=200, tool_s=0.5, tool_output_tokens=100)] * 3,
        )
        for i in range(16)
    ]
    config = scaled_config(SimConfig(model="qwen3-8b", num_gpus=1, predictor="oracle"), 0.05)
    assert config.engine_model == "sglang"
    heddle = simulate(trace, "heddle", config)
    unadmitted = simulate(trace, "heddle-no-admission", config)
    assert heddle.slowest.admission_s == 0.0
    assert heddle.makespan_s <= 1.02 * unadmitted.makespan_s
