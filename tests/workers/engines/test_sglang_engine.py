"""``SglangEngine`` against the protocol double, or a real server (HEDDLE_SGLANG_URL).

Lengths are dictated (``target_output_tokens``: SGLang's ``ignore_eos``) so a real model's EOS
cannot end a test early. Exact token equality across a preemption holds on the double (its
"model" depends only on the context); on a real server the test checks lengths and the seam.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
from double_marks import LONG, needs_double
from sglang_double import DoubleConfig, SglangDouble, poll_until, real_server_url

from heddle.events.base import SamplingParams
from heddle.policy.scheduling.preemption import PreemptionConfig
from heddle.workers.engines import create_engine
from heddle.workers.engines.base import (
    CacheWarmer,
    Engine,
    EngineError,
    GenerationRequest,
)
from heddle.workers.engines.sglang.client import RetryPolicy, SglangClient
from heddle.workers.engines.sglang.engine import SglangEngine
from heddle.workers.engines.sglang.options import EngineSettings

PROMPT = [201, 202, 203, 204, 205, 206, 207, 208, 209, 210]
STRICT_PPS = PreemptionConfig(min_priority_gap=0.0, min_relative_gap=0.0)
MEDIUM = 2000 if real_server_url() else 300
"""Long enough to preempt mid-way on a fast GPU; short on the double (300 tokens/s)."""


@pytest.fixture
def double() -> Iterator[SglangDouble | None]:
    if real_server_url():
        yield None
        return
    with SglangDouble(DoubleConfig(tokens_per_s=300.0, max_running=8)) as server:
        yield server


def url_of(double: SglangDouble | None) -> str:
    return real_server_url() or (double.url if double else "")


async def make_engine(double: SglangDouble | None, **settings: object) -> SglangEngine:
    client = SglangClient(url_of(double), retry=RetryPolicy(backoff_initial_s=0.01))
    engine = SglangEngine(client, EngineSettings(**settings))  # type: ignore[arg-type]
    await engine.start()
    return engine


@pytest.fixture(params=[False, True], ids=["plain", "streamed"])
async def engine(
    request: pytest.FixtureRequest, double: SglangDouble | None
) -> AsyncIterator[SglangEngine]:
    engine = await make_engine(double, max_running=2, stream=request.param, preemption=STRICT_PPS)
    yield engine
    await engine.close()


_ids = iter(range(10**9))


def request_of(
    num_tokens: int, *, priority: float = 0.0, prompt: list[int] | None = None, **extra: object
) -> GenerationRequest:
    index = next(_ids)
    return GenerationRequest(
        request_id=f"req{index:06d}",
        trajectory_id=f"t{index:06d}",
        input_token_ids=list(prompt or PROMPT),
        max_new_tokens=num_tokens,
        priority=priority,
        target_output_tokens=num_tokens,
        **extra,  # type: ignore[arg-type]
    )


async def test_the_engine_satisfies_the_engine_protocol(engine: SglangEngine) -> None:
    assert isinstance(engine, Engine) and isinstance(engine, CacheWarmer)
    capabilities = engine.capabilities
    assert capabilities.name == "sglang" and capabilities.model
    assert capabilities.tp_degree >= 1 and capabilities.max_running == 2
    assert not capabilities.can_export_kv and not capabilities.native_priority_update
    assert capabilities.max_context_tokens == 32768  # --context-length: the workers register it
    assert await engine.export_cache("t") is None
    with pytest.raises(EngineError, match="warm_up"):
        await engine.import_cache(None)  # type: ignore[arg-type]


async def test_generate_returns_tokens_logprobs_and_counters(engine: SglangEngine) -> None:
    result = await engine.generate(request_of(16))
    assert len(result.output_token_ids) == 16 == len(result.output_logprobs)
    assert all(logprob <= 0.0 for logprob in result.output_logprobs)
    assert result.finish_reason == "length"
    assert result.num_prompt_tokens == len(PROMPT)
    assert result.num_preemptions == 0 and result.decode_s > 0.0


async def test_a_stop_token_finishes_with_stop(engine: SglangEngine) -> None:
    free = await engine.generate(request_of(8, sampling=_greedy()))
    stop = free.output_token_ids[3]
    index = next(_ids)
    result = await engine.generate(
        GenerationRequest(
            request_id=f"req{index:06d}",
            trajectory_id="t",
            input_token_ids=list(PROMPT),
            max_new_tokens=8,
            sampling=_greedy(),
            stop_token_ids=(stop,),
        )
    )
    assert result.finish_reason == "stop"
    assert result.output_token_ids[-1] == stop
    assert result.output_token_ids == free.output_token_ids[: len(result.output_token_ids)]


async def test_abort_of_a_running_request_returns_its_partial_output(
    engine: SglangEngine, double: SglangDouble | None
) -> None:
    request = request_of(LONG)
    task = asyncio.create_task(engine.generate(request))
    await wait_generating(engine, double)
    await engine.abort(request.request_id)
    result = await asyncio.wait_for(task, 30)
    assert result.finish_reason == "abort"
    assert 0 < len(result.output_token_ids) < LONG
    assert len(result.output_logprobs) == len(result.output_token_ids)


async def test_abort_of_a_locally_queued_request_returns_at_once(engine: SglangEngine) -> None:
    blockers = [request_of(LONG, priority=9.0) for _ in range(2)]
    tasks = [asyncio.create_task(engine.generate(r)) for r in blockers]
    queued = request_of(5)
    queued_task = asyncio.create_task(engine.generate(queued))
    await asyncio.sleep(0.05)
    await engine.abort(queued.request_id)
    result = await asyncio.wait_for(queued_task, 10)
    assert (result.finish_reason, result.output_token_ids) == ("abort", [])
    for blocker in blockers:
        await engine.abort(blocker.request_id)
    await asyncio.gather(*tasks)


async def test_cancelling_generate_aborts_the_request_on_the_server(
    engine: SglangEngine, double: SglangDouble | None
) -> None:
    task = asyncio.create_task(engine.generate(request_of(LONG)))
    await wait_generating(engine, double)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(3000):  # 60 s
        if (await engine.client.loads()).num_running == 0:
            break
        await asyncio.sleep(0.02)
    assert (await engine.client.loads()).num_running == 0


async def test_preempt_then_resume_joins_both_parts(
    engine: SglangEngine, double: SglangDouble | None
) -> None:
    whole = await engine.generate(request_of(MEDIUM, sampling=_greedy()))
    request = request_of(MEDIUM, sampling=_greedy())
    task = asyncio.create_task(engine.generate(request))
    await wait_generating(engine, double)
    await engine.preempt(request.request_id)
    result = await asyncio.wait_for(task, 60)
    assert result.finish_reason == "length"
    assert len(result.output_token_ids) == MEDIUM == len(result.output_logprobs)
    assert result.num_preemptions >= 1
    if double is not None:
        assert result.output_token_ids == whole.output_token_ids
        assert result.output_logprobs == whole.output_logprobs
        resumed = double.bodies[-1]
        partial = len(resumed["input_ids"]) - len(PROMPT)
        assert 0 < partial < MEDIUM
        assert resumed["input_ids"] == PROMPT + whole.output_token_ids[:partial]
        assert resumed["sampling_params"]["max_new_tokens"] == MEDIUM - partial
        assert result.num_cached_tokens > 0  # the resumed segment hit the prefix cache


@needs_double
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_preemption_survives_servers_that_answer_aborts_with_errors(stream: bool) -> None:
    config = DoubleConfig(tokens_per_s=300.0, max_running=8, legacy_abort_errors=True)
    with SglangDouble(config) as legacy:
        engine = await make_engine(legacy, max_running=2, stream=stream, preemption=STRICT_PPS)
        try:
            whole = await engine.generate(request_of(200))
            request = request_of(200)
            task = asyncio.create_task(engine.generate(request))
            await wait_generating(engine, legacy)
            await engine.preempt(request.request_id)
            result = await asyncio.wait_for(task, 60)
            assert result.output_token_ids == whole.output_token_ids
            assert result.num_preemptions == 1
            aborted = request_of(LONG)
            aborted_task = asyncio.create_task(engine.generate(aborted))
            await wait_generating(engine, legacy)
            await engine.abort(aborted.request_id)
            assert (await asyncio.wait_for(aborted_task, 30)).finish_reason == "abort"
        finally:
            await engine.close()


async def test_waiting_requests_are_admitted_by_priority_then_arrival(
    double: SglangDouble | None,
) -> None:
    engine = await make_engine(double, max_running=1, preemption=STRICT_PPS)
    try:
        order = await _completion_order(engine, [1.0, 3.0, 2.0, 3.0])
        assert order == [1, 3, 2, 0]
    finally:
        await engine.close()


async def test_reprioritising_a_waiting_request_moves_it_forward(
    double: SglangDouble | None,
) -> None:
    engine = await make_engine(double, max_running=1, preemption=STRICT_PPS)
    try:
        order = await _completion_order(engine, [1.0, 3.0, 2.0], bump=(0, 5.0))
        assert order == [0, 1, 2]
    finally:
        await engine.close()


async def test_a_higher_priority_arrival_preempts_and_the_victim_completes(
    double: SglangDouble | None,
) -> None:
    engine = await make_engine(double, max_running=1, preemption=STRICT_PPS)
    try:
        low = request_of(MEDIUM, priority=1.0, sampling=_greedy())
        low_task = asyncio.create_task(engine.generate(low))
        await wait_generating(engine, double)
        high = await engine.generate(request_of(5, priority=10.0))
        assert not low_task.done() and high.finish_reason == "length"
        low_result = await asyncio.wait_for(low_task, 60)
        assert len(low_result.output_token_ids) == MEDIUM and low_result.num_preemptions >= 1
    finally:
        await engine.close()


async def test_an_engine_that_does_not_preempt_admits_by_priority_only(
    double: SglangDouble | None,
) -> None:
    """Heddle's bundles on the sglang engine model: a higher priority waits for a free slot."""
    engine = await make_engine(double, max_running=1, preemption=STRICT_PPS, preemptive=False)
    try:
        assert not engine.capabilities.can_preempt
        low = request_of(MEDIUM, priority=1.0)
        low_task = asyncio.create_task(engine.generate(low))
        await wait_generating(engine, double)
        high_task = asyncio.create_task(engine.generate(request_of(5, priority=10.0)))
        await engine.preempt(low.request_id)  # ignored
        low_result = await asyncio.wait_for(low_task, 60)
        assert low_result.num_preemptions == 0 and len(low_result.output_token_ids) == MEDIUM
        assert not high_task.done() or high_task.result().queue_s > 0.0
        assert (await asyncio.wait_for(high_task, 60)).finish_reason == "length"
    finally:
        await engine.close()


@needs_double
async def test_server_retractions_under_kv_pressure_are_counted() -> None:
    config = DoubleConfig(
        tokens_per_s=2000.0, max_running=4, max_total_num_tokens=300, new_token_ratio=0.0
    )
    with SglangDouble(config) as server:
        engine = await make_engine(server, max_running=4)
        try:
            requests = [request_of(60, prompt=[10 * i + 1] * 50) for i in range(4)]
            results = await asyncio.gather(*(engine.generate(r) for r in requests))
            alone = [
                await engine.generate(request_of(60, prompt=r.input_token_ids)) for r in requests
            ]
        finally:
            await engine.close()
    assert sum(result.num_preemptions for result in results) == server.scheduler.num_retractions
    assert server.scheduler.num_retractions > 0
    assert [r.output_token_ids for r in results] == [r.output_token_ids for r in alone]


@needs_double
async def test_a_server_without_priority_scheduling_gets_no_priority() -> None:
    """It would refuse one (``--abort-on-priority-when-disabled``): the engine sends none."""
    config = DoubleConfig(priority_scheduling=False, abort_on_priority_when_disabled=True)
    with SglangDouble(config) as server:
        engine = await make_engine(server, max_running=2)
        try:
            result = await engine.generate(request_of(4, priority=7.0))
        finally:
            await engine.close()
    assert len(result.output_token_ids) == 4
    assert all("priority" not in body or body["priority"] is None for body in server.bodies)


async def test_warm_up_prefills_the_context_so_the_next_step_hits_the_cache(
    engine: SglangEngine,
) -> None:
    # Fresh random tokens: a real server's cache outlives a test (and its parametrised twin).
    context = [secrets.randbelow(1000) for _ in range(64)]
    warm = await engine.warm_up("t-migrated", context)
    assert warm.num_prompt_tokens == 64 and warm.num_cached_tokens == 0
    result = await engine.generate(request_of(4, prompt=[*context, 7, 8]))
    assert result.num_cached_tokens >= 48


async def test_a_server_rejection_surfaces_as_an_engine_error(engine: SglangEngine) -> None:
    with pytest.raises(EngineError, match="context length"):
        await engine.generate(request_of(10**7))


async def test_load_reports_the_servers_counts_and_local_waiting(engine: SglangEngine) -> None:
    load = await engine.load()
    assert load.num_running >= 0 and load.num_waiting >= 0
    assert 0.0 <= load.kv_usage <= 1.0


async def test_the_registry_builds_a_working_engine(double: SglangDouble | None) -> None:
    engine = create_engine("sglang", {"url": url_of(double), "max-running": "3"})
    assert isinstance(engine, SglangEngine)
    await engine.start()
    try:
        assert engine.capabilities.max_running == 3
        result = await engine.generate(request_of(3))
        assert len(result.output_token_ids) == 3
    finally:
        await engine.close()


@needs_double
async def test_max_running_defaults_to_the_servers_capacity(double: SglangDouble | None) -> None:
    engine = await make_engine(double)
    try:
        assert engine.capabilities.max_running == 8
    finally:
        await engine.close()


@needs_double
async def test_the_wire_body_carries_int_priority_and_no_logprob_start_len(
    engine: SglangEngine, double: SglangDouble | None
) -> None:
    assert double is not None
    await engine.generate(request_of(2, priority=2.6))
    sent = double.bodies[-1]
    assert sent["priority"] == 3 and sent["return_logprob"] is True
    assert "logprob_start_len" not in sent
    assert sent["sampling_params"] == {
        "max_new_tokens": 2,
        "temperature": 1.0,
        "top_p": 1.0,
        "ignore_eos": True,
    }
    assert len(sent["rid"]) == len(engine._segments.next_rid())  # fixed width: never a prefix


def _greedy() -> SamplingParams:
    return SamplingParams(temperature=0.0)


async def _completion_order(
    engine: SglangEngine, priorities: list[float], bump: tuple[int, float] | None = None
) -> list[int]:
    """Block the single slot, queue requests with ``priorities``, optionally re-prioritise one,
    release the slot, and return the indices in completion order."""
    blocker = request_of(LONG, priority=100.0)
    blocker_task = asyncio.create_task(engine.generate(blocker))
    await poll_until(lambda: engine._queue is not None and engine._queue.num_slots_used == 1)
    requests = [request_of(4, priority=priority) for priority in priorities]
    order: list[int] = []

    async def run(index: int) -> None:
        await engine.generate(requests[index])
        order.append(index)

    tasks = [asyncio.create_task(run(index)) for index in range(len(requests))]
    await poll_until(
        lambda: engine._queue is not None and len(engine._queue.waiting) == len(requests)
    )
    if bump is not None:
        await engine.set_priority(requests[bump[0]].request_id, bump[1])
    await engine.abort(blocker.request_id)
    await asyncio.wait_for(asyncio.gather(blocker_task, *tasks), 60)
    return order


async def wait_generating(engine: SglangEngine, double: SglangDouble | None) -> None:
    """Until the server runs something and (on the double) has produced a few tokens."""
    for _ in range(1000):
        loads = await engine.client.loads()
        if loads.num_running > 0 and (
            double is None or any(len(r.output_ids) >= 3 for r in list(double.scheduler.running))
        ):
            if double is None:
                await asyncio.sleep(0.5)  # a real server: let it decode some tokens
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never started generating")
