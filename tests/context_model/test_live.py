"""The acceptance path: a whole Heddle in one process with ``--predictor context``, the
prediction service beside it on the same NATS, a rollout of a trace with text: its prediction
events name the online model at once and the context model when the service answers."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from heddle.bus import Bus
from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.context_model.model import ContextModel
from heddle.context_model.service import Batcher, model_predict, start_service, stop_service
from heddle.context_model.stream import traces_from_stream
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import Predicted
from heddle.events.codec import decode_event
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.workloads.text import with_text
from heddle.workloads.zoo import zoo_family

pytestmark = pytest.mark.timeout(180)
TIME_SCALE = 20.0
"""Slow enough that the tool calls (seconds of model time) outlast a service round trip."""


async def test_a_rollout_s_predictions_name_the_context_model(
    nats_url: str, tmp_path: Path, tiny_model: Path
) -> None:
    settings = Settings(nats_url=nats_url, data_dir=tmp_path / "data")
    family = zoo_family("search")
    trace = with_text(family.generate(family.draw(random.Random(4)), 4, seed=4), "search", 0.9, 4)
    control = ControlPlaneConfig(
        cost_model="qwen3-8b", predictor=PredictorConfig("context"), learn_from_ledger=False
    )
    options = InProcessOptions(
        num_workers=1,
        engine_options={"time_scale": str(TIME_SCALE), "model": "qwen3-8b"},
        control_plane=control,
    )
    model = ContextModel.load(tiny_model)
    seen: list[Predicted] = []

    async def on_message(message: object) -> None:
        event = decode_event(message.data)  # type: ignore[attr-defined]
        if isinstance(event, Predicted):
            seen.append(event)

    async with Bus(settings) as bus:
        handle, loop = await start_service(bus, Batcher(model_predict(model), "context"))
        subscription = await bus.client.subscribe("heddle.evt.traj.*.*.predicted", cb=on_message)
        try:
            async with InProcessDeployment(settings, options), HeddleClient(settings) as client:
                rollout_id = await client.submit(trace=trace, time_scale=TIME_SCALE)
                summary = await client.wait(rollout_id, timeout_s=150)
            await asyncio.sleep(0.2)
            recorded = await traces_from_stream(bus)
        finally:
            await subscription.unsubscribe()
            await stop_service(handle, loop)
    assert summary.num_completed == len(trace)
    by_predictor = {
        name: [e for e in seen if e.predictor == name] for name in ("online", "context")
    }
    assert by_predictor["online"], "the online model answers every prediction at once"
    assert by_predictor["context"], "the service's answers come as their own prediction events"
    assert all(e.step >= 0 for e in by_predictor["context"])  # after a generation, not before
    assert len(by_predictor["context"]) <= len([e for e in by_predictor["online"] if e.step >= 0])
    # The stream holds what `predictor train --from-stream` learns from, text included.
    assert sorted(t.id.split(":")[1] for t in recorded) == [f"t{i:06d}" for i in range(len(trace))]
    by_steps = {tuple(s.output_tokens for s in t.steps): t for t in recorded}
    for original in trace:
        copy = by_steps[tuple(s.output_tokens for s in original.steps)]
        assert [s.output_text for s in copy.steps] == [s.output_text for s in original.steps]
