"""Measurements of the torch engine for ``heddle bench engine``: F(b), prefill, resume, migration.

Everything runs through the ``Engine`` protocol on real forward passes; per-step times come from
the engine's own counters (``EngineStats``), so thread hand-offs do not blur them. Each figure is
the median of ``repeats`` runs, and each ratio compares two paths measured in the same run:

- decode: ``batch`` requests start together with the same prompt and output lengths; ITL(b) is
  the engine's decode time over its decode steps that ran at exactly ``batch`` rows (admission
  can take a step or two to fill the batch, and those steps count for their own sizes).
- prefill: one request of ``prefill_tokens`` prompt tokens and one output token.
- resume: a request of ``resume_context_tokens`` is preempted by a higher-priority one; resuming
  with kept KV costs the park + restore copies, with recompute the prefill of its context again.
- migration: export (copy + serialise) on one engine and import (deserialise + store) on another,
  against prefilling the same context from scratch on the target.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from heddle.bench.engine_figures import (
    DecodePoint,
    EngineBenchConfig,
    EngineBenchResult,
    MigrationCost,
    ResumeCost,
)
from heddle.events.base import SamplingParams
from heddle.workers.engines.base import GenerationRequest
from heddle.workers.engines.torch_engine.engine import TorchEngine
from heddle.workers.engines.torch_engine.options import TorchEngineOptions

_SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, seed=0)
_BYTE_TOKENS = 256


async def run_engine_bench(
    options: TorchEngineOptions, config: EngineBenchConfig
) -> EngineBenchResult:
    """Run every measurement (module docstring); ``options`` names model, device and dtype."""
    rng = random.Random(0)
    largest = max(config.batch_sizes)
    needed = 2 * largest * (config.context_tokens + config.decode_tokens) + config.prefill_tokens
    decode_options = dataclasses.replace(
        options,
        max_running=largest,
        max_kv_tokens=max(options.max_kv_tokens, needed),
        initial_kv_capacity_tokens=max(config.context_tokens, config.prefill_tokens) + 64,
    )
    async with _started(decode_options) as engine:
        decode = await _decode_curve(engine, config, rng)
        prefill_rate = await _prefill_rate(engine, config, rng)
        dtype = engine.capabilities.extras.get("dtype", options.dtype)
    resume = await _resume_cost(options, config, rng)
    migration = await _migration_cost(options, config, rng)
    return EngineBenchResult(
        model=options.model,
        device=options.device,
        dtype=dtype,
        decode=decode,
        prefill_tokens_per_s=prefill_rate,
        resume=resume,
        migration=migration,
        max_kv_tokens=options.max_kv_tokens,
        mean_context_tokens=config.mean_context_tokens,
    )


class _started:
    """``async with _started(options) as engine``: a started engine, closed on exit."""

    def __init__(self, options: TorchEngineOptions) -> None:
        self.engine = TorchEngine(options)

    async def __aenter__(self) -> TorchEngine:
        await self.engine.start()
        return self.engine

    async def __aexit__(self, *_: object) -> None:
        await self.engine.close()


def _prompt(rng: random.Random, length: int) -> list[int]:
    return [rng.randrange(_BYTE_TOKENS) for _ in range(length)]


def _request(
    name: str, prompt: list[int], max_new: int, priority: float = 0.0
) -> GenerationRequest:
    return GenerationRequest(
        request_id=name,
        trajectory_id=name,
        input_token_ids=prompt,
        max_new_tokens=max_new,
        priority=priority,
        sampling=_SAMPLING,
    )


async def _decode_curve(
    engine: TorchEngine, config: EngineBenchConfig, rng: random.Random
) -> list[DecodePoint]:
    await _decode_step_s(engine, max(config.batch_sizes), config, rng, -1)  # warm-up, untimed
    # Rounds interleave the batch sizes, so a noisy period on a shared machine hits all of them.
    runs: dict[int, list[float]] = {batch_size: [] for batch_size in config.batch_sizes}
    for run in range(config.repeats):
        for batch_size in config.batch_sizes:
            runs[batch_size].append(await _decode_step_s(engine, batch_size, config, rng, run))
    itl_s = {batch_size: statistics.median(times) for batch_size, times in runs.items()}
    base = itl_s[min(config.batch_sizes)]
    return [
        DecodePoint(
            batch_size=batch_size,
            itl_ms=itl * 1e3,
            tokens_per_s=batch_size / itl,
            interference=itl / base,
        )
        for batch_size, itl in sorted(itl_s.items())
    ]


async def _decode_step_s(
    engine: TorchEngine, batch_size: int, config: EngineBenchConfig, rng: random.Random, run: int
) -> float:
    before = await engine.stats()
    names = [f"decode-b{batch_size}-r{run}-{index}" for index in range(batch_size)]
    requests = [
        _request(name, _prompt(rng, config.context_tokens), config.decode_tokens) for name in names
    ]
    await asyncio.gather(*(engine.generate(request) for request in requests))
    after = await engine.stats()
    for name in names:
        await engine.release(name)
    # Only steps that ran at exactly this batch size: requests admitted a step apart ramp up.
    seconds = after.decode_s_by_batch[batch_size] - before.decode_s_by_batch.get(batch_size, 0.0)
    steps = after.num_decode_steps_by_batch[batch_size] - before.num_decode_steps_by_batch.get(
        batch_size, 0
    )
    return seconds / steps


async def _prefill_rate(
    engine: TorchEngine, config: EngineBenchConfig, rng: random.Random
) -> float:
    rates = []
    for run in range(config.repeats):
        name = f"prefill-{run}"
        result = await engine.generate(_request(name, _prompt(rng, config.prefill_tokens), 1))
        await engine.release(name)
        rates.append(config.prefill_tokens / result.prefill_s)
    return statistics.median(rates)


async def _resume_cost(
    options: TorchEngineOptions, config: EngineBenchConfig, rng: random.Random
) -> ResumeCost:
    kept, recomputed = [], []
    for run in range(config.repeats):
        prompt = _prompt(rng, config.resume_context_tokens)
        kept.append(await _preempt_once(options, "keep", prompt, run))
        recomputed.append(await _preempt_once(options, "recompute", prompt, run))
    kept_s, recompute_s = statistics.median(kept), statistics.median(recomputed)
    return ResumeCost(
        context_tokens=config.resume_context_tokens,
        kept_kv_ms=kept_s * 1e3,
        recompute_ms=recompute_s * 1e3,
        speedup=recompute_s / kept_s,
    )


async def _preempt_once(
    options: TorchEngineOptions, mode: str, prompt: list[int], run: int
) -> float:
    """Seconds the engine spent resuming one preempted request in ``mode``."""
    engine_options = dataclasses.replace(
        options,
        max_running=1,
        preemption_mode=mode,  # type: ignore[arg-type]
        max_kv_tokens=max(options.max_kv_tokens, 2 * len(prompt) + 64),
        initial_kv_capacity_tokens=len(prompt) + 64,
    )
    async with _started(engine_options) as engine:
        victim = asyncio.create_task(engine.generate(_request(f"victim-{run}", prompt, 8)))
        await _until(lambda: _has_running(engine))
        await engine.generate(_request(f"urgent-{run}", prompt[:8], 2, priority=1.0))
        result = await victim
        stats = await engine.stats()
    if result.num_preemptions != 1:
        raise RuntimeError(f"the benchmark victim was preempted {result.num_preemptions} times")
    return stats.park_s + stats.restore_s if mode == "keep" else stats.recompute_s


async def _has_running(engine: TorchEngine) -> bool:
    return (await engine.load()).num_running > 0


async def _until(predicate: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(100_000):
        if await predicate():
            return
        await asyncio.sleep(0.0005)
    raise RuntimeError("the engine never started the benchmark request")


@dataclass(frozen=True, slots=True)
class _Move:
    export_s: float
    import_s: float
    reprefill_s: float
    payload_bytes: int


async def _migration_cost(
    options: TorchEngineOptions, config: EngineBenchConfig, rng: random.Random
) -> MigrationCost:
    engine_options = dataclasses.replace(
        options,
        max_running=1,
        max_kv_tokens=max(options.max_kv_tokens, 4 * config.migration_context_tokens),
        initial_kv_capacity_tokens=config.migration_context_tokens + 64,
    )
    async with _started(engine_options) as source, _started(engine_options) as target:
        for engine in (source, target):  # warm-up, untimed
            await engine.generate(_request("warm-up", _prompt(rng, 64), 2))
            await engine.export_cache("warm-up")
            await engine.release("warm-up")
        moves = [
            await _migrate_once(
                source, target, _prompt(rng, config.migration_context_tokens - 1), run
            )
            for run in range(config.repeats)
        ]
    export_s = statistics.median(move.export_s for move in moves)
    import_s = statistics.median(move.import_s for move in moves)
    reprefill_s = statistics.median(move.reprefill_s for move in moves)
    return MigrationCost(
        context_tokens=config.migration_context_tokens,
        payload_bytes=moves[-1].payload_bytes,
        export_ms=export_s * 1e3,
        import_ms=import_s * 1e3,
        reprefill_ms=reprefill_s * 1e3,
        speedup=reprefill_s / (export_s + import_s),
    )


async def _migrate_once(
    source: TorchEngine, target: TorchEngine, prompt: list[int], run: int
) -> _Move:
    """Move a trajectory's KV (prompt + 1 output) from source to target; time the target's
    re-prefill of the same context as the alternative."""
    name = f"migrate-{run}"
    await source.generate(_request(name, prompt, 2))
    started = time.perf_counter()
    snapshot = await source.export_cache(name)
    exported = time.perf_counter()
    if snapshot is None:
        raise RuntimeError("the source engine exported no KV for the benchmark trajectory")
    await target.import_cache(snapshot)
    imported = time.perf_counter()
    fresh = await target.generate(_request(f"fresh-{run}", [*prompt, 0], 1))
    for engine, trajectory in ((source, name), (target, name), (target, f"fresh-{run}")):
        await engine.release(trajectory)
    return _Move(exported - started, imported - exported, fresh.prefill_s, len(snapshot.payload))
