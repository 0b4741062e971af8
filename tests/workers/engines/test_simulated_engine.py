"""The sim engine: the batching model driven in scaled real time behind the Engine protocol."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from heddle.events import SamplingParams
from heddle.workers.engines import EngineOptionError, create_engine
from heddle.workers.engines.base import (
    CacheMismatchError,
    CacheSnapshot,
    Engine,
    EngineError,
    GenerationRequest,
)
from heddle.workers.engines.simulated import SimulatedEngine, SimulatedEngineOptions, pseudo_tokens

FAST = 2000.0
"""Model seconds per wall second: a 1000-token generation of Qwen3-8B takes ~4 ms of wall time."""


def _request(
    rid: str,
    traj: str,
    context: int,
    *,
    target: int | None = 50,
    max_new: int = 4096,
    priority: float = 0.0,
    seed: int | None = 7,
) -> GenerationRequest:
    return GenerationRequest(
        request_id=rid,
        trajectory_id=traj,
        input_token_ids=list(range(context)),
        max_new_tokens=max_new,
        priority=priority,
        sampling=SamplingParams(seed=seed),
        target_output_tokens=target,
    )


@pytest.fixture
async def engine() -> AsyncIterator[SimulatedEngine]:
    sim = SimulatedEngine(SimulatedEngineOptions(time_scale=FAST))
    await sim.start()
    yield sim
    await sim.close()


async def test_is_an_engine_built_by_the_registry() -> None:
    built = create_engine("sim", {"time-scale": "100", "model": "qwen3-32b", "tp": "2"})
    assert isinstance(built, SimulatedEngine) and isinstance(built, Engine)
    caps = built.capabilities
    assert (caps.name, caps.tp_degree, caps.can_export_kv) == ("sim", 2, False)  # sglang
    torch_model = create_engine("sim", {"engine-model": "torch"})
    assert isinstance(torch_model, SimulatedEngine) and torch_model.capabilities.can_export_kv
    assert torch_model._model.config.cache == "trajectory"
    assert built._model.config.cache == "radix"
    assert not built._model.config.preemption_keeps_kv
    assert caps.max_kv_tokens == built.cost.max_kv_tokens > 0
    with pytest.raises(EngineOptionError, match="unknown option --bogus"):
        create_engine("sim", {"bogus": "1"})
    with pytest.raises(EngineOptionError, match="model must be one of"):
        create_engine("sim", {"model": "gpt-5"})
    with pytest.raises(EngineOptionError, match=r"tp must be one of \(1, 2, 4, 8\)"):
        create_engine("sim", {"tp": "3"})
    with pytest.raises(EngineOptionError, match="time_scale must be > 0"):
        create_engine("sim", {"time_scale": "0"})
    with pytest.raises(EngineOptionError, match="engine_model must be one of"):
        create_engine("sim", {"engine-model": "vllm"})


async def test_solo_generation_costs_the_analytic_prefill_and_decode(
    engine: SimulatedEngine,
) -> None:
    result = await engine.generate(_request("a", "t1", context=300, target=120))
    assert result.finish_reason == "stop"
    assert len(result.output_token_ids) == len(result.output_logprobs) == 120
    assert all(0 <= token < 256 for token in result.output_token_ids)
    assert all(logprob <= 0.0 for logprob in result.output_logprobs)
    cost = engine.cost
    assert result.prefill_s == pytest.approx(cost.prefill_s(300))
    # Brute force: one decode step per token, each over the context so far.
    expected_decode_s = sum(cost.decode_step_s(1, 300 + i) for i in range(120))
    assert result.decode_s == pytest.approx(expected_decode_s, rel=1e-6)
    assert result.queue_s == pytest.approx(0.0, abs=1e-9)
    assert (result.num_prompt_tokens, result.num_cached_tokens) == (300, 0)


async def test_tokens_are_deterministic_and_lengths_follow_the_request(
    engine: SimulatedEngine,
) -> None:
    first = await engine.generate(_request("a", "t1", context=40, target=30))
    await engine.release("t1")
    again = await engine.generate(_request("b", "t1", context=40, target=30))
    assert first.output_token_ids == again.output_token_ids
    assert first.output_logprobs == again.output_logprobs
    assert (first.output_token_ids, first.output_logprobs) == pseudo_tokens("t1", 40, 7, 30, 256)
    other_seed = await engine.generate(_request("c", "t2", context=40, target=30, seed=8))
    assert other_seed.output_token_ids != first.output_token_ids
    capped = await engine.generate(_request("d", "t3", context=10, target=500, max_new=64))
    assert (len(capped.output_token_ids), capped.finish_reason) == (64, "length")
    untargeted = await engine.generate(_request("e", "t4", context=10, target=None, max_new=33))
    assert (len(untargeted.output_token_ids), untargeted.finish_reason) == (33, "length")


async def test_next_turn_reuses_the_prefix_cache(engine: SimulatedEngine) -> None:
    await engine.generate(_request("a", "t1", context=200, target=100))
    turn = await engine.generate(_request("b", "t1", context=350, target=10))
    assert turn.num_cached_tokens == 300
    assert turn.num_recomputed_tokens == 0
    assert turn.prefill_s == pytest.approx(engine.cost.prefill_s(50, 300))


@pytest.mark.parametrize("engine_model", ["torch", "sglang"])
async def test_higher_priority_preempts_and_the_victim_resumes(engine_model: str) -> None:
    sim = SimulatedEngine(
        SimulatedEngineOptions(time_scale=FAST, max_running=1, engine_model=engine_model)
    )
    await sim.start()
    try:
        low = asyncio.create_task(sim.generate(_request("low", "a", 100, target=3000)))
        high = asyncio.create_task(sim.generate(_request("high", "b", 100, priority=5.0)))
        done_order: list[str] = []
        for finished in asyncio.as_completed([low, high]):
            done_order.append((await finished).request_id)
        assert done_order == ["high", "low"]
        low_result = low.result()
        assert low_result.num_preemptions == 1
        assert len(low_result.output_token_ids) == 3000
        if engine_model == "torch":
            assert low_result.num_recomputed_tokens == 0  # the preempted job kept its KV
        else:  # retracted: what it had generated is recomputed, its prompt stayed cached
            assert 0 < low_result.num_recomputed_tokens < 3000
        assert high.result().queue_s < 0.05  # at most the decode step in flight
    finally:
        await sim.close()


async def test_reprioritising_a_waiting_request_changes_admission_order() -> None:
    sim = SimulatedEngine(SimulatedEngineOptions(time_scale=FAST, max_running=1, preemptive=False))
    await sim.start()
    try:
        # Long enough (~0.1 s of wall time) that a loaded machine's stall cannot let it end,
        # and admit the second, before the third is reprioritised.
        long = _request("first", "a", 10, target=30_000, max_new=30_000)
        first = asyncio.create_task(sim.generate(long))
        second = asyncio.create_task(sim.generate(_request("second", "b", 10, target=20)))
        third = asyncio.create_task(sim.generate(_request("third", "c", 10, target=20)))
        await asyncio.sleep(0)
        await sim.set_priority("third", 9.0)
        results = await asyncio.gather(first, second, third)
        assert results[2].queue_s < results[1].queue_s
        assert results[0].num_preemptions == 0
    finally:
        await sim.close()


async def test_explicit_preempt_requeues_with_kv_kept() -> None:
    sim = SimulatedEngine(SimulatedEngineOptions(time_scale=200.0, max_running=1))
    await sim.start()
    try:
        victim = asyncio.create_task(sim.generate(_request("v", "a", 10, target=4000)))
        await asyncio.sleep(0.01)
        await sim.preempt("v")
        result = await victim
        assert result.num_preemptions == 1
        assert len(result.output_token_ids) == 4000
    finally:
        await sim.close()


async def test_abort_and_cancel_return_partial_output_and_free_the_slot() -> None:
    sim = SimulatedEngine(SimulatedEngineOptions(time_scale=100.0))
    await sim.start()
    try:
        task = asyncio.create_task(sim.generate(_request("x", "a", 10, target=100_000)))
        await asyncio.sleep(0.05)
        await sim.abort("x")
        partial = await task
        assert partial.finish_reason == "abort"
        assert 0 < len(partial.output_token_ids) < 100_000
        assert (
            partial.output_token_ids
            == pseudo_tokens("a", 10, 7, len(partial.output_token_ids), 256)[0]
        )
        cancelled = asyncio.create_task(sim.generate(_request("y", "b", 10, target=100_000)))
        await asyncio.sleep(0.01)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        load = await sim.load()
        assert (load.num_running, load.num_waiting) == (0, 0)
    finally:
        await sim.close()


async def test_kv_export_and_import_warm_the_target() -> None:
    source = SimulatedEngine(SimulatedEngineOptions(time_scale=FAST, engine_model="torch"))
    target = SimulatedEngine(SimulatedEngineOptions(time_scale=FAST, engine_model="torch"))
    cold = SimulatedEngine(SimulatedEngineOptions(time_scale=FAST, engine_model="torch"))
    other_model = SimulatedEngine(
        SimulatedEngineOptions(time_scale=FAST, model="qwen3-14b", engine_model="torch")
    )
    for sim in (source, target, cold, other_model):
        await sim.start()
    try:
        await source.generate(_request("a", "t", 500, target=100))
        assert await source.export_cache("missing") is None
        snapshot = await source.export_cache("t")
        assert snapshot is not None and snapshot.num_tokens == 600
        assert snapshot.num_bytes == 600 * source.shape.kv_bytes_per_token
        await source.release("t")
        assert (await source.load()).num_cached_trajectories == 0

        await target.import_cache(snapshot)
        warm = await target.generate(_request("b", "t", 650, target=10))
        assert (warm.num_cached_tokens, warm.num_recomputed_tokens) == (600, 0)
        assert warm.prefill_s == pytest.approx(target.cost.prefill_s(50, 600))
        unwarmed = await cold.generate(_request("b", "t", 650, target=10))
        assert unwarmed.num_cached_tokens == 0
        assert unwarmed.prefill_s == pytest.approx(cold.cost.prefill_s(650))
        with pytest.raises(CacheMismatchError, match="qwen3-8b"):
            await other_model.import_cache(snapshot)
    finally:
        for sim in (source, target, cold, other_model):
            await sim.close()


async def test_the_sglang_model_exports_nothing_and_warms_up_instead() -> None:
    source = SimulatedEngine(SimulatedEngineOptions(time_scale=FAST))
    target = SimulatedEngine(SimulatedEngineOptions(time_scale=FAST))
    for sim in (source, target):
        await sim.start()
    try:
        await source.generate(_request("a", "t", 500, target=100))
        assert await source.export_cache("t") is None
        with pytest.raises(EngineError, match="cannot import"):
            await target.import_cache(CacheSnapshot("t", 600, target.fingerprint, b"{}", 0))
        warmed = await target.warm_up("t", list(range(600)))
        assert (warmed.num_prompt_tokens, warmed.num_cached_tokens) == (600, 0)
        assert (await target.load()).num_cached_trajectories == 1
        turn = await target.generate(_request("b", "t", 650, target=10))
        assert (turn.num_cached_tokens, turn.num_recomputed_tokens) == (600, 0)
        assert turn.prefill_s == pytest.approx(target.cost.prefill_s(50, 600))
        with pytest.raises(ValueError, match="non-empty"):
            await target.warm_up("t", [])
    finally:
        for sim in (source, target):
            await sim.close()


async def test_generate_needs_a_started_engine_and_close_fails_pending() -> None:
    sim = SimulatedEngine(SimulatedEngineOptions(time_scale=1.0))
    with pytest.raises(RuntimeError, match="not started"):
        await sim.generate(_request("a", "t", 10))
    await sim.start()
    task = asyncio.create_task(sim.generate(_request("a", "t", 10, target=10_000)))
    await asyncio.sleep(0.01)
    await sim.close()
    with pytest.raises(RuntimeError, match="engine closed"):
        await task


async def test_a_measured_profile_replaces_the_preset(tmp_path: Path) -> None:
    profile = tmp_path / "itl.csv"
    profile.write_text("tp,batch,itl_ms\n1,1,10.0\n1,8,12.0\n")
    sim = create_engine("sim", {"profile": str(profile), "time_scale": str(FAST)})
    assert isinstance(sim, SimulatedEngine)
    assert sim.cost.decode_step_s(1, 0) == pytest.approx(0.010)
    await sim.start()
    try:
        result = await sim.generate(_request("a", "t", 20, target=30))
        expected_decode_s = sum(sim.cost.decode_step_s(1, 20 + i) for i in range(30))
        assert result.decode_s == pytest.approx(expected_decode_s, rel=1e-6)
    finally:
        await sim.close()
    with pytest.raises(EngineOptionError, match=r"must be a \.csv or \.json file"):
        create_engine("sim", {"profile": str(tmp_path / "itl.txt")})
    with pytest.raises(ValueError, match="cannot read profile"):
        create_engine("sim", {"profile": str(tmp_path / "missing.json")})
