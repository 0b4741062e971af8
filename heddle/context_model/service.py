"""``heddle predictor serve``: the context model as a NATS micro service, beside the control plane.

Requests (``heddle.context_model.wire``) on ``PREDICT_SUBJECT`` queue up; one batching loop takes
what has queued (up to ``max_batch``, waiting at most ``max_wait_ms`` after the first for more),
runs the model once on the batch in a worker thread (the event loop keeps receiving), and
answers each request. ``STATS_SUBJECT`` answers the latency figures (``ServiceStats``), which
the service also logs every ``report_every_s``. ``nats micro ls`` lists it as
``heddle-predictor``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from heddle.bus.bus import Bus
from heddle.bus.micro import Endpoint, ServiceHandle, ServiceRefusal, serve_service
from heddle.config import Settings
from heddle.context_model.model import ContextModel
from heddle.context_model.wire import (
    PREDICT_SUBJECT,
    PREDICTOR_SERVICE_NAME,
    STATS_SUBJECT,
    PredictionReply,
    PredictionRequest,
    ServiceStats,
    request_decoder,
)

log = logging.getLogger(__name__)

BatchPredict = Callable[[Sequence[PredictionRequest]], np.ndarray]
"""Requests -> (n, 3) remaining tokens, steps, tool seconds."""


def model_predict(model: ContextModel) -> BatchPredict:
    """The batch function of a loaded model."""

    def predict(requests: Sequence[PredictionRequest]) -> np.ndarray:
        return model.predict([r.progress() for r in requests], [r.baseline() for r in requests])

    return predict


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    max_batch: int = 64
    """Requests answered by one model call at most."""
    max_wait_ms: float = 2.0
    """After the first request of a batch, how long to wait for more."""
    report_every_s: float = 30.0
    """Seconds between latency log lines (0: never)."""
    max_latency_samples: int = 10_000
    """Latencies kept for the percentiles (the most recent)."""


@dataclass(slots=True)
class _Pending:
    request: PredictionRequest
    arrived_s: float
    answer: asyncio.Future[PredictionReply]


@dataclass(slots=True)
class Batcher:
    """Queues requests and answers them in batches; ``run()`` is its loop."""

    predict: BatchPredict
    predictor: str
    config: ServiceConfig = field(default_factory=ServiceConfig)
    _queue: asyncio.Queue[_Pending] = field(default_factory=asyncio.Queue)
    _latencies_ms: deque[float] = field(default_factory=deque)
    num_requests: int = 0
    num_batches: int = 0

    async def submit(self, request: PredictionRequest) -> PredictionReply:
        answer: asyncio.Future[PredictionReply] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(request, time.perf_counter(), answer))
        return await answer

    async def run(self) -> None:
        while True:
            batch = await self._take_batch()
            try:
                outputs = await asyncio.to_thread(self.predict, [p.request for p in batch])
            except Exception as exc:  # a model failure answers every request of the batch
                log.exception("prediction batch failed")
                for pending in batch:
                    if not pending.answer.done():
                        pending.answer.set_exception(ServiceRefusal("500", repr(exc)))
                continue
            self._answer(batch, outputs)

    async def _take_batch(self) -> list[_Pending]:
        batch = [await self._queue.get()]
        deadline = time.perf_counter() + self.config.max_wait_ms / 1000
        while len(batch) < self.config.max_batch:
            timeout = deadline - time.perf_counter()
            if self._queue.empty() and timeout <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), max(0.0, timeout)))
            except TimeoutError:
                break
        return batch

    def _answer(self, batch: list[_Pending], outputs: np.ndarray) -> None:
        now = time.perf_counter()
        self.num_batches += 1
        for pending, row in zip(batch, outputs, strict=True):
            latency_ms = (now - pending.arrived_s) * 1000
            self._record(latency_ms)
            if pending.answer.done():
                continue  # the requester went away
            pending.answer.set_result(
                PredictionReply(
                    predictor=self.predictor,
                    remaining_output_tokens=float(row[0]),
                    remaining_steps=float(row[1]),
                    remaining_tool_s=float(row[2]),
                    service_ms=round(latency_ms, 3),
                    batch_size=len(batch),
                )
            )

    def _record(self, latency_ms: float) -> None:
        self.num_requests += 1
        self._latencies_ms.append(latency_ms)
        if len(self._latencies_ms) > self.config.max_latency_samples:
            self._latencies_ms.popleft()

    def stats(self) -> ServiceStats:
        samples = np.asarray(self._latencies_ms) if self._latencies_ms else np.zeros(1)
        return ServiceStats(
            num_requests=self.num_requests,
            num_batches=self.num_batches,
            p50_ms=round(float(np.percentile(samples, 50)), 3),
            p99_ms=round(float(np.percentile(samples, 99)), 3),
            mean_batch_size=round(self.num_requests / max(1, self.num_batches), 2),
        )


async def start_service(bus: Bus, batcher: Batcher) -> tuple[ServiceHandle, asyncio.Task[None]]:
    """Register the endpoints and start the batching loop; stop both with ``stop_service``."""

    async def predict(body: bytes, headers: Mapping[str, str]) -> bytes:
        try:
            request = request_decoder.decode(body)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ServiceRefusal("400", f"not a prediction request: {exc}") from None
        return msgspec.json.encode(await batcher.submit(request))

    async def stats(body: bytes, headers: Mapping[str, str]) -> bytes:
        return msgspec.json.encode(batcher.stats())

    loop_task = asyncio.create_task(batcher.run(), name="predictor-batcher")
    handle = await serve_service(
        bus,
        PREDICTOR_SERVICE_NAME,
        "0.1.0",
        "The context predictor: remaining tokens, steps and tool seconds of a trajectory",
        [
            Endpoint(
                "predict",
                PREDICT_SUBJECT,
                predict,
                "PredictionRequest -> PredictionReply",
                is_concurrent=True,
            ),
            Endpoint("stats", STATS_SUBJECT, stats, "latency figures"),
        ],
    )
    return handle, loop_task


async def stop_service(handle: ServiceHandle, loop_task: asyncio.Task[None]) -> None:
    await handle.stop()
    loop_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await loop_task


async def serve_predictor(
    settings: Settings, model_folder: Path, config: ServiceConfig, device: str
) -> None:
    """Load the model and serve until SIGINT or SIGTERM, logging the latency figures; then stop
    the service and close the connection (an embedded server it started stops with it)."""
    model = await asyncio.to_thread(ContextModel.load, model_folder, device)
    batcher = Batcher(model_predict(model), model.config.name, config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(stop_signal, stop.set)
    async with Bus(settings) as bus:
        handle, loop_task = await start_service(bus, batcher)
        log.info("predictor %s serving on %s", model.config.name, PREDICT_SUBJECT)
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), config.report_every_s or None)
                if config.report_every_s:
                    log.info("predictor latency: %s", msgspec.json.encode(batcher.stats()).decode())
        finally:
            await stop_service(handle, loop_task)
