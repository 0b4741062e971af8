"""The torch engine through the ``Engine`` protocol: concurrency, migration, abort, lifecycle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from heddle.events.base import SamplingParams
from heddle.workers.engines import create_engine
from heddle.workers.engines.base import (
    CacheMismatchError,
    Engine,
    EngineError,
    GenerationRequest,
)
from heddle.workers.engines.torch_engine.engine import TorchEngine
from heddle.workers.engines.torch_engine.options import TorchEngineOptions

SAMPLED = SamplingParams(temperature=0.8, top_p=0.9, seed=77)


def _request(
    request_id: str,
    trajectory_id: str,
    prompt: list[int],
    *,
    max_new: int = 10,
    priority: float = 0.0,
) -> GenerationRequest:
    return GenerationRequest(
        request_id=request_id,
        trajectory_id=trajectory_id,
        input_token_ids=prompt,
        max_new_tokens=max_new,
        priority=priority,
        sampling=SAMPLED,
    )


def _prompt(seed: int, length: int = 12) -> list[int]:
    return [(seed * 31 + index * 7) % 256 for index in range(length)]


@pytest.fixture
async def engine() -> AsyncIterator[TorchEngine]:
    torch_engine = TorchEngine(TorchEngineOptions(max_running=4))
    await torch_engine.start()
    yield torch_engine
    await torch_engine.close()


async def _wait_running(engine: TorchEngine, count: int) -> None:
    """Poll until ``count`` requests run (``count`` 0: until none does)."""
    for _ in range(20_000):
        num_running = (await engine.load()).num_running
        if (num_running >= count) if count else num_running == 0:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never reached {count} running requests")


async def test_registry_builds_a_torch_engine_that_satisfies_the_protocol() -> None:
    built = create_engine("torch", {"max-running": "2", "max-kv-tokens": "1024"})
    assert isinstance(built, TorchEngine) and isinstance(built, Engine)
    assert built.capabilities.max_running == 2 and built.capabilities.can_export_kv
    with pytest.raises(EngineError, match="not started"):
        await built.generate(_request("r1", "t1", [1, 2]))


async def test_concurrent_generations_batch_and_keep_the_event_loop_responsive(
    engine: TorchEngine,
) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    requests = [_request(f"r{i}", f"t{i}", _prompt(i), max_new=8 + i) for i in range(6)]
    results = await asyncio.gather(*(engine.generate(request) for request in requests))
    ticking.cancel()
    for request, result in zip(requests, results, strict=True):
        assert result.request_id == request.request_id
        assert len(result.output_token_ids) == request.max_new_tokens
        assert all(0 <= token < 259 for token in result.output_token_ids)
    stats = await engine.stats()
    assert stats.num_decode_steps < sum(request.max_new_tokens for request in requests)
    assert ticks > 10  # the loop kept running while the engine thread computed


async def test_migrated_trajectory_continues_on_another_engine_without_prefill() -> None:
    source, target = TorchEngine(TorchEngineOptions()), TorchEngine(TorchEngineOptions())
    await source.start()
    await target.start()
    try:
        turn1 = await source.generate(_request("a1", "traj", _prompt(1, 40), max_new=12))
        snapshot = await source.export_cache("traj")
        assert snapshot is not None and snapshot.num_tokens == 40 + 12 - 1
        await target.import_cache(snapshot)
        context = _prompt(1, 40) + turn1.output_token_ids + [9, 8, 7]
        migrated = await target.generate(_request("b2", "traj", context, max_new=10))
        target_stats = await target.stats()
        unmigrated = await source.generate(_request("a2", "traj", context, max_new=10))
    finally:
        await source.close()
        await target.close()
    assert migrated.num_cached_tokens == unmigrated.num_cached_tokens == 51
    assert migrated.num_recomputed_tokens == 0
    # B computed only the last output of turn 1 and the 3 tool tokens: no re-prefill.
    assert target_stats.num_prefilled_tokens == 1 + 3
    assert target_stats.num_restored_tokens == 51
    assert migrated.output_token_ids == unmigrated.output_token_ids
    assert migrated.output_logprobs == pytest.approx(unmigrated.output_logprobs, abs=1e-4)


async def test_cache_from_another_model_is_refused(engine: TorchEngine) -> None:
    other = TorchEngine(TorchEngineOptions(seed=5))
    await other.start()
    try:
        await other.generate(_request("x1", "traj", _prompt(3), max_new=3))
        snapshot = await other.export_cache("traj")
    finally:
        await other.close()
    assert snapshot is not None
    with pytest.raises(CacheMismatchError, match="cannot be used by an engine running"):
        await engine.import_cache(snapshot)
    assert await engine.export_cache("traj") is None


async def test_a_started_engine_reports_its_models_context(engine: TorchEngine) -> None:
    """The worker registers it: the operations service refuses a prompt that does not fit
    (the tiny model takes 32,768 positions)."""
    assert engine.capabilities.max_context_tokens == 32768


async def test_abort_resolves_generate_with_the_partial_output(engine: TorchEngine) -> None:
    task = asyncio.create_task(engine.generate(_request("r1", "t1", _prompt(4), max_new=10_000)))
    await _wait_running(engine, 1)
    await engine.abort("r1")
    result = await task
    assert result.finish_reason == "abort"
    assert len(result.output_token_ids) == len(result.output_logprobs) >= 1
    assert (await engine.load()).num_cached_trajectories == 1


async def test_cancelling_generate_aborts_the_request(engine: TorchEngine) -> None:
    task = asyncio.create_task(engine.generate(_request("r1", "t1", _prompt(5), max_new=10_000)))
    await _wait_running(engine, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _wait_running(engine, 0)
    # The request id is free again.
    again = await engine.generate(_request("r1", "t1", _prompt(5), max_new=2))
    assert again.finish_reason == "length"


async def test_priority_preemption_through_the_protocol() -> None:
    engine = TorchEngine(TorchEngineOptions(max_running=1))
    await engine.start()
    try:
        low = asyncio.create_task(engine.generate(_request("low", "t1", _prompt(6), max_new=60)))
        await _wait_running(engine, 1)
        high = await engine.generate(_request("high", "t2", _prompt(7), max_new=3, priority=5))
        low_result = await low
        await engine.set_priority("nobody", 1.0)  # unknown ids are ignored
        await engine.preempt("nobody")
    finally:
        await engine.close()
    assert high.num_preemptions == 0 and low_result.num_preemptions == 1
    assert low_result.num_recomputed_tokens == 0 and len(low_result.output_token_ids) == 60


async def test_release_drops_the_cached_prefix_and_close_stops_the_engine(
    engine: TorchEngine,
) -> None:
    await engine.generate(_request("r1", "t1", _prompt(8), max_new=2))
    assert await engine.export_cache("t1") is not None
    await engine.release("t1")
    assert await engine.export_cache("t1") is None
    with pytest.raises(ValueError, match="token ids"):
        await engine.generate(_request("r2", "t2", [300]))
    await engine.close()
    with pytest.raises(EngineError, match="not started"):
        await engine.load()
