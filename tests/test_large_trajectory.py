"""A trajectory of 256k tokens on a stock NATS server (the default 1 MiB ``max_payload``): its
large arrays travel through the object store (``heddle.bus.payloads``) and the trainer receives
exactly the token ids and logprobs the worker generated."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from heddle.bus import Bus, ReplayQuery
from heddle.bus.server import EmbeddedNatsServer
from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import Completed, Generated, GenerationStarted, TrajectorySubmitted
from heddle.events.subjects import trajectory_subject
from heddle.ledger import open_ledger, queries
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.rollout.submission import TaskOptions
from heddle.traces import TraceStep, TraceTrajectory

NUM_STEPS = 8
STEP_TOKENS = 32_768
TOOL_TOKENS = 64
TIME_SCALE = 20_000.0


@pytest.fixture
def stock_server(tmp_path: Path) -> Iterator[EmbeddedNatsServer]:
    with EmbeddedNatsServer(tmp_path / "nats", max_payload_bytes=None) as server:
        yield server


def long_trace() -> list[TraceTrajectory]:
    steps = [TraceStep(output_tokens=STEP_TOKENS, tool_s=0.5, tool_output_tokens=TOOL_TOKENS)]
    steps = steps * (NUM_STEPS - 1) + [TraceStep(output_tokens=STEP_TOKENS)]
    return [TraceTrajectory(id="long", group="g", prompt_tokens=512, steps=steps)]


async def test_a_256k_token_trajectory_completes_on_a_default_limit_server(
    stock_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    connection = await nats.connect(stock_server.url)
    assert connection.max_payload == 1024 * 1024  # the server's default, not raised
    await connection.close()
    settings = Settings(nats_url=stock_server.url, data_dir=tmp_path / "data")
    control = ControlPlaneConfig(predictor=PredictorConfig("oracle"), worker_timeout_s=30.0)
    options = InProcessOptions(
        num_workers=1, engine_options={"time_scale": str(TIME_SCALE)}, control_plane=control
    )
    async with InProcessDeployment(settings, options):
        async with HeddleClient(settings, trainer="t") as client:
            rollout_id = await client.submit(trace=long_trace(), time_scale=TIME_SCALE)
            received = [c async for c in client.completions(rollout_id)]
            await client.wait(rollout_id, timeout_s=120)
        async with Bus(settings) as bus:
            stream = await stream_arrays(bus, rollout_id)
    [completed] = received
    assert completed.num_output_tokens == NUM_STEPS * STEP_TOKENS == 262_144
    assert completed.prompt_token_ids == stream.prompt
    assert completed.response_token_ids == stream.response
    assert completed.response_logprobs == stream.logprobs
    assert completed.loss_mask == stream.mask
    # The Completed keeps its ids and logprobs in the object store; a step's 32,768 compressed
    # ids and logprobs (about 5 bytes a token) fit in one event.
    assert stream.num_references >= 2
    assert stream.largest_bytes <= settings.max_event_bytes
    ledger = open_ledger(settings.ledger_url)
    try:
        [row] = queries.trajectories(ledger, rollout_id)
        steps = queries.steps(ledger, rollout_id, row.traj_id)
    finally:
        ledger.close()
    assert row.num_output_tokens == NUM_STEPS * STEP_TOKENS
    assert [step.num_output_tokens for step in steps] == [STEP_TOKENS] * NUM_STEPS


class StreamArrays:
    """The trajectory as its stored step events tell it (every array resolved)."""

    def __init__(self) -> None:
        self.prompt: list[int] = []
        self.response: list[int] = []
        self.logprobs: list[float] = []
        self.mask: list[int] = []
        self.num_references = 0
        """Arrays of the stored events that are references to objects."""
        self.largest_bytes = 0
        """Size of the largest stored event."""


async def stream_arrays(bus: Bus, rollout_id: str) -> StreamArrays:
    arrays = StreamArrays()
    query = ReplayQuery(filter_subjects=(trajectory_subject(rollout_id, "*", ">"),))
    raw = bus.replay(query, bytes)
    async for batch in raw.batches():
        for item in batch:
            arrays.num_references += item.message.count(b'"ref":{')
            arrays.largest_bytes = max(arrays.largest_bytes, len(item.message))
    async for record in bus.replay_events(query):
        event = await bus.resolve(record.message)
        match event:
            case TrajectorySubmitted():
                arrays.prompt = list(event.spec.prompt_token_ids)
            case GenerationStarted():
                arrays.response += event.input_token_ids
                arrays.logprobs += [0.0] * len(event.input_token_ids)
                arrays.mask += [0] * len(event.input_token_ids)
            case Generated():
                arrays.response += event.output_token_ids
                arrays.logprobs += event.output_logprobs
                arrays.mask += [1] * len(event.output_token_ids)
            case Completed():
                assert len(event.response_token_ids) == len(arrays.response)
    return arrays


PROMPT_TOKENS = 120_000
SMALL_EVENT_BYTES = 64 * 1024
"""The byte tokenizer's ids (below 259) compress to about a byte each: a 120k-token prompt is
about 160 KB of JSON, so the limit is lowered for its submission to go through the object
store, as a real vocabulary's prompt of this length does at the default 256 KiB."""


async def test_a_120k_token_prompt_runs_to_completion(
    stock_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    """A submission whose prompt is kept in the object store is placed (the control plane's
    decoder keeps the reference, the worker resolves it) and completes; the trainer gets the
    whole prompt back. Before, the control plane dead-lettered every such submission and the
    rollout never started."""
    settings = Settings(
        nats_url=stock_server.url,
        data_dir=tmp_path / "data",
        max_event_bytes=SMALL_EVENT_BYTES,
    )
    rng = random.Random(7)
    prompt = [rng.randrange(256) for _ in range(PROMPT_TOKENS)]
    control = ControlPlaneConfig(predictor=PredictorConfig("oracle"), worker_timeout_s=30.0)
    options = InProcessOptions(
        num_workers=1, engine_options={"time_scale": str(TIME_SCALE)}, control_plane=control
    )
    task_options = TaskOptions(
        group_size=1, max_steps=1, max_new_tokens=16, max_total_tokens=131_072
    )
    async with InProcessDeployment(settings, options), HeddleClient(settings) as client:
        rollout_id = await client.submit(
            [{"question": "what comes next?", "answer": "1"}],
            environment="math",
            task_options=task_options,
            prompt_token_ids=[prompt],
        )
        async with asyncio.timeout(180):
            [completed] = [c async for c in client.completions(rollout_id)]
            summary = await client.wait(rollout_id)
        submitted = await stored_submission(client.bus, rollout_id)
    assert b'"ref":{' in submitted  # the prompt went through the object store
    assert completed.prompt_token_ids == prompt
    assert completed.finish_reason != "error" and completed.num_output_tokens > 0
    assert summary.num_completed == 1


async def stored_submission(bus: Bus, rollout_id: str) -> bytes:
    query = ReplayQuery(filter_subjects=(trajectory_subject(rollout_id, "*", "submitted"),))
    [record] = [record async for record in bus.replay(query, bytes)]
    return record.message
