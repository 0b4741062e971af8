"""The prediction service's latency, measured through a real NATS server, and the share of its
answers that would arrive before the trajectory's next generation.

Every prediction of a test trace after steps 1-3 is sent to the service as the control plane
sends it (a request at the tool call), ``concurrency`` in flight at once (the trajectories whose
tool calls overlap); each one's round trip is timed at the client. An answer is on time when
its round trip is shorter than the tool call it overlaps (the call of the step it follows, the
trace's ``tool_s``): the next generation cannot start before that call returns.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from heddle.bus.bus import Bus
from heddle.bus.micro import request
from heddle.bus.server import EmbeddedNatsServer
from heddle.config import Settings
from heddle.context_model.model import ContextModel
from heddle.context_model.service import Batcher, model_predict, start_service, stop_service
from heddle.context_model.train import REPORTED_STEPS
from heddle.context_model.wire import PREDICT_SUBJECT, PredictionRequest
from heddle.policy.prediction import progress_of
from heddle.policy.prediction.online import OnlinePredictor
from heddle.traces import TraceTrajectory


@dataclass(frozen=True, slots=True)
class ServeFigures:
    num_requests: int
    concurrency: int
    p50_ms: float
    p99_ms: float
    on_time_share: float
    mean_batch_size: float


def timed_requests(
    trace: Sequence[TraceTrajectory], online: OnlinePredictor
) -> list[tuple[bytes, float]]:
    """(request body, seconds until the next generation can start) per prediction."""
    requests = []
    for trajectory in trace:
        for num_steps in REPORTED_STEPS:
            if len(trajectory.steps) <= num_steps:
                continue
            progress = progress_of(trajectory, num_steps)
            baseline = (online.predict(progress), online.predict_tool_s(progress))
            body = PredictionRequest.of("bench", num_steps - 1, progress, baseline)
            requests.append((msgspec.json.encode(body), trajectory.steps[num_steps - 1].tool_s))
    return requests


async def _measure(
    bus: Bus, requests: Sequence[tuple[bytes, float]], concurrency: int
) -> tuple[list[float], list[bool]]:
    latencies_s: list[float] = [0.0] * len(requests)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(requests)):
        queue.put_nowait(index)

    async def client() -> None:
        while not queue.empty():
            index = queue.get_nowait()
            started = time.perf_counter()
            await request(bus, PREDICT_SUBJECT, requests[index][0], timeout_s=30.0)
            latencies_s[index] = time.perf_counter() - started

    await asyncio.gather(*(client() for _ in range(concurrency)))
    on_time = [
        latency < deadline for latency, (_, deadline) in zip(latencies_s, requests, strict=True)
    ]
    return latencies_s, on_time


async def measure_serving(
    model: ContextModel, requests: Sequence[tuple[bytes, float]], concurrency: int
) -> ServeFigures:
    """Serve ``model`` on a temporary embedded NATS server and time ``requests`` through it."""
    with (
        tempfile.TemporaryDirectory(prefix="heddle-bench-predictor-") as folder,
        EmbeddedNatsServer(Path(folder) / "nats") as server,
    ):
        settings = Settings(nats_url=server.url, data_dir=Path(folder) / "data")
        async with Bus(settings) as bus:
            batcher = Batcher(model_predict(model), model.config.name)
            handle, loop = await start_service(bus, batcher)
            try:
                await _measure(bus, requests[: min(len(requests), 64)], concurrency)  # warm-up
                batcher.num_requests = batcher.num_batches = 0
                latencies_s, on_time = await _measure(bus, requests, concurrency)
            finally:
                await stop_service(handle, loop)
    milliseconds = np.asarray(latencies_s) * 1000
    return ServeFigures(
        num_requests=len(requests),
        concurrency=concurrency,
        p50_ms=round(float(np.percentile(milliseconds, 50)), 2),
        p99_ms=round(float(np.percentile(milliseconds, 99)), 2),
        on_time_share=round(float(np.mean(on_time)), 4),
        mean_batch_size=round(batcher.num_requests / max(1, batcher.num_batches), 2),
    )
