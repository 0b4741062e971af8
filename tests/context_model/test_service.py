"""The prediction service on a real nats-server, and the control plane's shell around it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np
import pytest

from heddle.bus import Bus
from heddle.bus.micro import ServiceRefusal, request
from heddle.config import Settings
from heddle.context_model.model import ContextModel
from heddle.context_model.service import (
    Batcher,
    ServiceConfig,
    model_predict,
    start_service,
    stop_service,
)
from heddle.context_model.wire import (
    PREDICT_SUBJECT,
    STATS_SUBJECT,
    PredictionRequest,
    ServiceStats,
    reply_decoder,
)
from heddle.controlplane.context_model_client import ContextPredictions
from heddle.events import Predicted
from heddle.policy.prediction import ContextRequest, Progress

PROGRESS = Progress(
    "t0",
    "g0",
    50,
    num_steps=1,
    output_tokens=30,
    first_output_tokens=30,
    last_output_tokens=30,
    first_output_text="Look up the author, then answer.",
    last_output_text="Look up the author.",
)
BASELINE = (120.0, 3.0)


async def test_the_batcher_answers_every_request_in_fewer_model_calls() -> None:
    batch_sizes: list[int] = []

    def predict(requests: Sequence[PredictionRequest]) -> np.ndarray:
        batch_sizes.append(len(requests))
        return np.array([[r.output_tokens * 2, 1.0, 0.5] for r in requests])

    batcher = Batcher(predict, "doubler", ServiceConfig(max_batch=8, max_wait_ms=20))
    loop = asyncio.create_task(batcher.run())
    requests = [
        PredictionRequest.of("r1", 0, Progress(f"t{i}", output_tokens=i, num_steps=1), BASELINE)
        for i in range(20)
    ]
    replies = await asyncio.gather(*(batcher.submit(r) for r in requests))
    loop.cancel()
    assert [reply.remaining_output_tokens for reply in replies] == [2.0 * i for i in range(20)]
    assert sum(batch_sizes) == 20 and max(batch_sizes) <= 8 and len(batch_sizes) < 20
    stats = batcher.stats()
    assert stats.num_requests == 20 and stats.num_batches == len(batch_sizes)
    assert stats.p99_ms >= stats.p50_ms >= 0


async def test_the_service_answers_with_the_context_model(
    nats_url: str, tiny_model: Path, tmp_path: Path
) -> None:
    model = ContextModel.load(tiny_model)
    async with Bus(Settings(nats_url=nats_url, data_dir=tmp_path)) as bus:
        handle, loop = await start_service(bus, Batcher(model_predict(model), model.config.name))
        try:
            body = msgspec.json.encode(PredictionRequest.of("r1", 0, PROGRESS, BASELINE))
            reply = reply_decoder.decode(await request(bus, PREDICT_SUBJECT, body))
            expected = model.predict([PROGRESS], [BASELINE])[0]
            assert reply.predictor == "context"
            assert reply.remaining_output_tokens == pytest.approx(expected[0], rel=1e-5)
            assert reply.remaining_tool_s == pytest.approx(expected[2], rel=1e-5)
            with pytest.raises(ServiceRefusal) as refused:
                await request(bus, PREDICT_SUBJECT, b'{"traj_id": 3}')
            assert refused.value.code == "400"
            stats = msgspec.json.decode(await request(bus, STATS_SUBJECT, b""), type=ServiceStats)
            assert stats.num_requests == 1
        finally:
            await stop_service(handle, loop)


async def test_answers_in_time_are_published_late_and_missing_ones_are_not(
    nats_url: str, tiny_model: Path, tmp_path: Path
) -> None:
    model = ContextModel.load(tiny_model)
    published: list[Predicted] = []

    async def publish(event: Predicted) -> None:
        published.append(event)

    async with Bus(Settings(nats_url=nats_url, data_dir=tmp_path)) as bus:

        async def ask(subject: str, body: bytes, timeout_s: float) -> bytes:
            return await request(bus, subject, body, timeout_s)

        client = ContextPredictions(ask, publish, timeout_s=60.0)  # a loaded CPU is slow
        client.send(ContextRequest("r1", 0, PROGRESS, BASELINE))
        await client.drain()
        assert client.counts["unavailable"] == 1 and published == []  # no service yet

        handle, loop = await start_service(bus, Batcher(model_predict(model), model.config.name))
        try:
            client.send(ContextRequest("r1", 0, PROGRESS, BASELINE))
            await client.drain()
            (event,) = published
            assert (event.predictor, event.step, event.traj_id) == ("context", 0, "t0")
            assert event.event_id == "r1:t0:0:predicted:context"
            later = ContextRequest("r1", 1, Progress("t0", num_steps=2, output_tokens=40), BASELINE)
            client.send(later)
            client.tool_returned("r1", "t0", 1)  # the next generation starts before the answer
            await client.drain()
            assert client.counts["late"] == 1 and len(published) == 1
        finally:
            await stop_service(handle, loop)


async def test_the_prediction_hooks_send_the_decider_s_requests_once_attached() -> None:
    import events_factory as b

    from heddle.context_model.wire import PredictionReply
    from heddle.control.prediction import PredictionDecider
    from heddle.controlplane.live_predictor import PredictionHooks, PredictorConfig

    asked: list[PredictionRequest] = []
    published: list[Predicted] = []

    async def ask(subject: str, body: bytes, timeout_s: float) -> bytes:
        asked.append(msgspec.json.decode(body, type=PredictionRequest))
        reply = PredictionReply(
            predictor="context",
            remaining_output_tokens=7.0,
            remaining_steps=1.0,
            remaining_tool_s=0.5,
            service_ms=1.0,
            batch_size=1,
        )
        return msgspec.json.encode(reply)

    async def publish(event: Predicted) -> None:
        published.append(event)

    hooks = PredictionHooks(PredictorConfig("context"))
    decider = PredictionDecider(hooks.predictor)

    def feed(event: object) -> list[object]:
        hooks.before(event)  # type: ignore[arg-type]
        outputs = decider.decide(event)  # type: ignore[arg-type]
        hooks.after(event)  # type: ignore[arg-type]
        return list(outputs)

    for event in (b.submitted("t0", 0), b.generated("t0", 0, 30), b.tool_called("t0", 0)):
        feed(event)  # replayed: not attached yet, nothing is asked
    assert asked == []
    hooks.context_client = ContextPredictions(ask, publish)
    feed(b.tool_returned("t0", 0))
    feed(b.generated("t0", 1, 20))
    (inline,) = feed(b.tool_called("t0", 1))
    assert isinstance(inline, Predicted) and inline.predictor == "online"
    await hooks.context_client.drain()
    assert [(r.rollout_id, r.traj_id, r.step) for r in asked] == [("r1", "t0", 1)]
    assert asked[0].baseline() == (
        inline.predicted_remaining_tokens,
        inline.predicted_remaining_tool_s,
    )
    (answer,) = published
    assert (answer.predictor, answer.step, answer.predicted_remaining_tokens) == ("context", 1, 7.0)


async def test_requests_over_nats_are_batched(nats_url: str, tmp_path: Path) -> None:
    import time

    def slow(requests: Sequence[PredictionRequest]) -> np.ndarray:
        time.sleep(0.05)  # the model's time: requests queue behind it
        return np.ones((len(requests), 3))

    batcher = Batcher(slow, "slow", ServiceConfig(max_wait_ms=1))
    async with Bus(Settings(nats_url=nats_url, data_dir=tmp_path)) as bus:
        handle, loop = await start_service(bus, batcher)
        try:
            body = msgspec.json.encode(PredictionRequest.of("r1", 0, PROGRESS, BASELINE))
            replies = await asyncio.gather(
                *(request(bus, PREDICT_SUBJECT, body) for _ in range(16))
            )
        finally:
            await stop_service(handle, loop)
    assert len(replies) == 16
    assert batcher.num_requests == 16 and batcher.num_batches < 16
    assert max(reply_decoder.decode(r).batch_size for r in replies) > 1
