"""A submission that reaches the stream but that the control plane cannot read (published past
the operations service, as a deployment without credentials allows): its trajectory ends failed
with the reason, which the trainer gets on its completion subjects, and the rollout's other
trajectory still runs to the end (its rollout used to stay "running 0/2" forever)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import RolloutSubmitted, TrajectorySubmitted, encode
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.rollout.submission import trace_specs
from heddle.traces import TraceStep, TraceTrajectory

pytestmark = pytest.mark.timeout(180)
TIME_SCALE = 200.0


async def test_a_dead_lettered_submission_fails_visibly_and_the_rest_runs(
    nats_url: str, tmp_path: Path
) -> None:
    settings = Settings(nats_url=nats_url, data_dir=tmp_path / "data")
    control = ControlPlaneConfig(cost_model="qwen3-8b", predictor=PredictorConfig("oracle"))
    options = InProcessOptions(
        num_workers=1, engine_options={"time_scale": str(TIME_SCALE)}, control_plane=control
    )
    line = TraceTrajectory(id="a", prompt_tokens=8, steps=[TraceStep(output_tokens=4)])
    (spec,) = trace_specs([line])
    good = TrajectorySubmitted(event_id="bad1:t000000:submitted", rollout_id="bad1",
                               occurred_at=1.0, traj_id="t000000", spec=spec)  # fmt: skip
    bad = msgspec.json.decode(encode(good))
    bad.update(event_id="bad1:t000001:submitted", traj_id="t000001")
    bad["spec"]["max_steps"] = "many"  # not an integer: the decoders refuse it
    opened = RolloutSubmitted(
        event_id="bad1:submitted", rollout_id="bad1", occurred_at=1.0, policy="heddle",
        num_trajectories=2, time_scale=TIME_SCALE,
    )  # fmt: skip
    async with InProcessDeployment(settings, options), HeddleClient(settings) as client:
        await client.bus.publish(opened)
        await client.bus.publish(good)
        await client.bus.publish_raw(
            "heddle.evt.traj.bad1.t000001.submitted", msgspec.json.encode(bad), bad["event_id"]
        )
        ended = {t.traj_id: t async for t in client.completions("bad1")}
        summary = await client.wait("bad1", timeout_s=60)
    assert ended["t000000"].finish_reason in {"stop", "length", "max_steps", "environment_done"}
    refused = ended["t000001"]
    assert refused.finish_reason == "error" and refused.index == 1
    assert "could not be read" in refused.reason and "max_steps" in refused.reason
    assert (summary.num_completed, summary.num_failed) == (1, 1) and summary.is_finished
