"""Sandbox benchmark: a trivial snippet, cold (spawn per call) vs warm (pre-warmed pool).

Both modes run in one process, one after the other, with the same isolation and limits:
- sequential: one call at a time with ``gap_s`` of idle time between calls (as a worker's tool
  calls arrive, with generation in between): the latency a call sees;
- concurrent: ``concurrency`` calls at a time, back to back: sustained calls/s. Every call needs
  a fresh process in both modes, so at saturation both are bounded by process start-up; the pool
  mainly moves start-up off the call's critical path.
Latency is measured from the caller's side: for cold calls it includes spawning the process.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from heddle.workers.tools.isolation import Isolation, UidAllocator
from heddle.workers.tools.limits import SandboxConfig
from heddle.workers.tools.pool import SandboxPool
from heddle.workers.tools.sandbox import SandboxRequest, SandboxResult
from heddle.workers.tools.sandbox_calls import run_once

TRIVIAL_SNIPPET = "print(1 + 1)"


@dataclass(frozen=True, slots=True)
class LatencyStats:
    num_calls: int
    calls_per_s: float
    p50_ms: float
    p99_ms: float
    num_failed: int


@dataclass(frozen=True, slots=True)
class ModeFigures:
    sequential: LatencyStats
    concurrent: LatencyStats


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list (``fraction`` in [0, 1])."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = max(1, min(len(sorted_values), math.ceil(fraction * len(sorted_values))))
    return sorted_values[rank - 1]


def latency_stats(latencies_s: list[float], elapsed_s: float, num_failed: int) -> LatencyStats:
    ordered = sorted(latencies_s)
    return LatencyStats(
        num_calls=len(latencies_s),
        calls_per_s=len(latencies_s) / elapsed_s if elapsed_s > 0 else 0.0,
        p50_ms=percentile(ordered, 0.50) * 1e3,
        p99_ms=percentile(ordered, 0.99) * 1e3,
        num_failed=num_failed,
    )


SandboxCall = Callable[[], Awaitable[SandboxResult]]
TimedCall = Callable[[], Awaitable[tuple[float, bool]]]
"""A call that returns its own latency (seconds) and whether it succeeded."""


async def measure_timed(
    call: TimedCall, num_calls: int, concurrency: int, gap_s: float = 0.0
) -> LatencyStats:
    """``num_calls`` calls, at most ``concurrency`` at a time; each caller idles ``gap_s``
    after its call (not counted in the latency)."""
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    num_failed = 0

    async def one() -> None:
        nonlocal num_failed
        async with gate:
            latency_s, ok = await call()
            latencies.append(latency_s)
            num_failed += not ok
            await asyncio.sleep(gap_s)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(num_calls)))
    return latency_stats(latencies, time.perf_counter() - started, num_failed)


async def measure(
    call: SandboxCall, num_calls: int, concurrency: int, gap_s: float = 0.0
) -> LatencyStats:
    """``measure_timed`` over sandbox calls of the trivial snippet, timed from the caller's side;
    a call fails unless it printed ``2``."""

    async def timed() -> tuple[float, bool]:
        started = time.perf_counter()
        result = await call()
        return time.perf_counter() - started, result.status == "ok" and result.stdout == "2\n"

    return await measure_timed(timed, num_calls, concurrency, gap_s)


async def bench_cold(
    config: SandboxConfig, isolation: Isolation, num_calls: int, concurrency: int, gap_s: float
) -> ModeFigures:
    request = SandboxRequest(code=TRIVIAL_SNIPPET)
    uids = UidAllocator(config.uid_base, config.num_uids)

    async def call() -> SandboxResult:
        uid = uids.allocate()
        try:
            return await run_once(request, config, isolation, uid)
        finally:
            uids.release(uid)

    return ModeFigures(
        sequential=await measure(call, num_calls, 1, gap_s),
        concurrent=await measure(call, num_calls, concurrency),
    )


async def bench_warm(
    config: SandboxConfig, num_calls: int, concurrency: int, min_warm: int, gap_s: float
) -> tuple[ModeFigures, int]:
    """Warm figures and how many calls still had to spawn (the pool ran dry)."""
    request = SandboxRequest(code=TRIVIAL_SNIPPET)
    max_procs = min_warm + concurrency
    async with SandboxPool(config, min_warm=min_warm, max_procs=max_procs) as pool:

        def call() -> Awaitable[SandboxResult]:
            return pool.run(request)

        await pool.wait_until_parked(min_warm)
        sequential = await measure(call, num_calls, 1, gap_s)
        await pool.wait_until_parked(min_warm)
        concurrent = await measure(call, num_calls, concurrency)
        return ModeFigures(sequential, concurrent), pool.stats().num_cold_starts
