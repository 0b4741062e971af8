"""The SGLang HTTP client against the protocol double, or a real server (HEDDLE_SGLANG_URL).

Token ids stay small (< 1000) so any real model's vocabulary has them. Tests that need the
double's own hooks (failure injection, its deterministic "model") skip against a real server.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from double_marks import LONG, needs_double
from sglang_double import DoubleConfig, SglangDouble, poll_until, real_server_url

from heddle.bus.server import free_port
from heddle.workers.engines.sglang.client import (
    ClientTimeouts,
    RetryPolicy,
    SglangClient,
    SglangError,
    SglangUnavailable,
)
from heddle.workers.engines.sglang.protocol import GenerateBody, SamplingParamsWire

PROMPT = [101, 102, 103, 104, 105, 106, 107, 108]
FAST_RETRY = RetryPolicy(max_retries=3, backoff_initial_s=0.01, backoff_max_s=0.05)


@pytest.fixture
def double() -> Iterator[SglangDouble | None]:
    if real_server_url():
        yield None
        return
    with SglangDouble(DoubleConfig(tokens_per_s=400.0, max_running=2)) as server:
        yield server


@pytest.fixture
async def client(double: SglangDouble | None) -> AsyncIterator[SglangClient]:
    url = real_server_url() or (double.url if double else "")
    async with SglangClient(url, retry=FAST_RETRY) as sglang:
        await sglang.wait_ready(timeout_s=60)
        yield sglang


_rids = iter(range(10**9))


def body(max_new_tokens: int, *, temperature: float = 1.0) -> GenerateBody:
    params = SamplingParamsWire(
        max_new_tokens=max_new_tokens, temperature=temperature, ignore_eos=True
    )
    return GenerateBody(
        input_ids=list(PROMPT),
        sampling_params=params,
        rid=f"client-test-{next(_rids):08d}",
        return_logprob=True,
    )


async def test_generate_returns_the_requested_tokens_with_logprobs(client: SglangClient) -> None:
    output = await client.generate(body(12))
    meta = output.meta_info
    assert len(output.output_ids) == 12 == meta.completion_tokens
    assert meta.finish_reason is not None and meta.finish_reason.type == "length"
    assert meta.prompt_tokens == len(PROMPT)
    assert len(output.output_logprobs) == 12
    assert all(logprob <= 0.0 for logprob in output.output_logprobs)


async def test_streaming_yields_growing_outputs_ending_with_the_finished_one(
    client: SglangClient,
) -> None:
    frames = [frame async for frame in client.generate_stream(body(6, temperature=0.0))]
    lengths = [len(frame.output_ids) for frame in frames]
    assert lengths == sorted(lengths) and lengths[-1] == 6
    assert frames[-1].is_finished and not any(frame.is_finished for frame in frames[:-1])
    for earlier, later in itertools.pairwise(frames):
        assert later.output_ids[: len(earlier.output_ids)] == earlier.output_ids
    whole = await client.generate(body(6, temperature=0.0))
    assert whole.output_ids == frames[-1].output_ids


async def test_a_stop_token_ends_generation_and_is_reported(client: SglangClient) -> None:
    greedy = (await client.generate(body(10, temperature=0.0))).output_ids
    stop = greedy[4]
    output = await client.generate(
        GenerateBody(
            input_ids=list(PROMPT),
            sampling_params=SamplingParamsWire(
                max_new_tokens=10, temperature=0.0, stop_token_ids=[stop]
            ),
            rid=f"client-test-{next(_rids):08d}",
        )
    )
    assert output.output_ids == greedy[: greedy.index(stop) + 1]
    finish = output.meta_info.finish_reason
    assert finish is not None and finish.type == "stop" and finish.matched == stop


async def test_aborting_a_running_request_returns_its_partial_output(
    client: SglangClient, double: SglangDouble | None
) -> None:
    long = body(LONG)
    task = asyncio.create_task(client.generate(long))
    await wait_until_generating(client, double)
    await client.abort(long.rid)
    output = await asyncio.wait_for(task, 30)
    finish = output.meta_info.finish_reason
    assert finish is not None and finish.type == "abort"
    assert 0 < len(output.output_ids) < LONG
    assert len(output.output_logprobs) == len(output.output_ids)


@needs_double
async def test_aborting_a_queued_request_returns_no_output(
    client: SglangClient, double: SglangDouble | None
) -> None:
    blockers = [body(LONG), body(LONG)]  # the double runs two at once
    tasks = [asyncio.create_task(client.generate(b)) for b in blockers]
    queued = body(5)
    queued_task = asyncio.create_task(client.generate(queued))
    await wait_until_generating(client, double)
    assert double is not None
    await poll_until(lambda: queued.rid in {req.rid for req in list(double.scheduler.waiting)})
    await client.abort(queued.rid)
    output = await asyncio.wait_for(queued_task, 30)
    assert output.output_ids == [] and output.meta_info.finish_reason is not None
    assert output.meta_info.finish_reason.type == "abort"
    for blocker in blockers:
        await client.abort(blocker.rid)
    await asyncio.gather(*tasks)


async def test_a_rejected_request_raises_with_the_servers_message(client: SglangClient) -> None:
    with pytest.raises(SglangError, match="temperature") as caught:
        await client.generate(body(4, temperature=-1.0))
    assert caught.value.status_code == 400


async def test_an_unknown_sampling_key_is_rejected_by_the_server(client: SglangClient) -> None:
    async with httpx.AsyncClient(base_url=client.base_url, trust_env=False) as raw:
        response = await raw.post(
            "/generate",
            json={"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2, "bogus": 1}},
        )
    assert response.status_code == 400
    assert "bogus" in response.text


async def test_text_and_input_ids_together_are_rejected(client: SglangClient) -> None:
    async with httpx.AsyncClient(base_url=client.base_url, trust_env=False) as raw:
        response = await raw.post(
            "/generate",
            json={"text": "hi", "input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}},
        )
    assert response.status_code == 400


@needs_double
async def test_503_is_retried_with_backoff_until_it_succeeds(
    client: SglangClient, double: SglangDouble | None
) -> None:
    assert double is not None
    double.fail_next(2, status=503)
    output = await client.generate(body(3))
    assert len(output.output_ids) == 3
    assert len(double.bodies) == 1  # the two refused attempts never reached the scheduler


@needs_double
async def test_503_past_the_retry_budget_raises_unavailable(
    client: SglangClient, double: SglangDouble | None
) -> None:
    assert double is not None
    double.fail_next(FAST_RETRY.max_retries + 1, status=503)
    with pytest.raises(SglangUnavailable, match="4 attempts"):
        await client.generate(body(3))


@needs_double
async def test_a_streamed_request_is_retried_on_503_too(
    client: SglangClient, double: SglangDouble | None
) -> None:
    assert double is not None
    double.fail_next(1, status=503)
    frames = [frame async for frame in client.generate_stream(body(3))]
    assert len(frames[-1].output_ids) == 3


async def test_an_unreachable_server_raises_unavailable_after_retries() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with SglangClient(url, retry=FAST_RETRY, timeouts=ClientTimeouts(connect_s=1)) as dead:
        with pytest.raises(SglangUnavailable, match="cannot connect"):
            await dead.generate(body(1))
        assert not await dead.is_ready()
        with pytest.raises(SglangUnavailable, match="not ready"):
            await dead.wait_ready(timeout_s=0.2, poll_interval_s=0.05)


async def test_loads_and_server_info_parse(client: SglangClient) -> None:
    info = await client.server_info()
    assert info.model_name and info.tp_size >= 1
    loads = await client.loads()
    assert loads.loads and loads.max_running_requests > 0
    assert 0.0 <= loads.token_usage <= 1.0
    assert loads.num_running >= 0 and loads.num_waiting >= 0


@needs_double
async def test_a_full_queue_answers_503_and_the_retry_gets_in_once_room_frees() -> None:
    config = DoubleConfig(tokens_per_s=400.0, max_running=1, max_queued=1)
    with SglangDouble(config) as small:
        patient = RetryPolicy(max_retries=50, backoff_initial_s=0.02, backoff_max_s=0.05)
        async with SglangClient(small.url, retry=patient) as sglang:
            running, queued = body(LONG), body(LONG)
            tasks = [asyncio.create_task(sglang.generate(b)) for b in (running, queued)]
            # Both in (one running, one queued): an abort sent before a request arrives is lost.
            await poll_until(
                lambda: len(small.scheduler.in_flight) == 2 and len(small.scheduler.waiting) == 1,
                what="a full queue",
            )
            third = asyncio.create_task(sglang.generate(body(2)))
            await asyncio.sleep(0.1)  # a few refused attempts
            assert not third.done() and len(small.bodies) == 2
            await sglang.abort(queued.rid)
            await sglang.abort(running.rid)
            assert len((await asyncio.wait_for(third, 30)).output_ids) == 2
            await asyncio.gather(*tasks)


@needs_double
async def test_incremental_streams_are_merged_into_whole_outputs() -> None:
    with SglangDouble(DoubleConfig(incremental=True)) as deltas:
        async with SglangClient(deltas.url, incremental_streaming=True) as sglang:
            frames = [frame async for frame in sglang.generate_stream(body(5))]
            whole = await sglang.generate(body(5))
    assert frames[-1].output_ids == whole.output_ids
    assert frames[-1].output_logprobs == whole.output_logprobs
    assert [len(frame.output_ids) for frame in frames] == [1, 2, 3, 4, 5]


@needs_double
async def test_older_servers_are_probed_and_read_through_their_old_paths() -> None:
    with SglangDouble(DoubleConfig(legacy_paths=True, tp_size=4)) as old:
        async with SglangClient(old.url) as sglang:
            assert await sglang.is_ready()  # no /ready: /v1/loads answers
            assert (await sglang.server_info()).tp_size == 4  # via /get_server_info


@needs_double
async def test_wait_ready_waits_for_a_slow_starting_server() -> None:
    with SglangDouble(DoubleConfig(startup_delay_s=0.3)) as slow:
        async with SglangClient(slow.url) as sglang:
            assert not await sglang.is_ready()
            await sglang.wait_ready(timeout_s=30, poll_interval_s=0.05)
            assert await sglang.is_ready()


async def wait_until_generating(client: SglangClient, double: SglangDouble | None) -> None:
    """Until the server runs something and (on the double) has produced a few tokens."""
    for _ in range(600):
        loads = await client.loads()
        if loads.num_running > 0 and (
            double is None or any(len(r.output_ids) >= 3 for r in list(double.scheduler.running))
        ):
            if double is None:
                await asyncio.sleep(0.5)  # a real server: let it decode some tokens
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never started generating")
