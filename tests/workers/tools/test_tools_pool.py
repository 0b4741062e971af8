"""The pre-warmed pool: one call per process, scaling with demand, bounded concurrency."""

from __future__ import annotations

import asyncio

import pytest
from waiting import until

from heddle.workers.tools.limits import SandboxConfig, SandboxLimits
from heddle.workers.tools.pool import SandboxPool
from heddle.workers.tools.sandbox import SandboxError, SandboxRequest

CONFIG = SandboxConfig(limits=SandboxLimits(timeout_s=20.0, max_output_bytes=4096))


async def test_calls_take_parked_processes_and_leave_nothing_behind() -> None:
    leak = (
        "import os\n"
        "print(os.path.exists('/tmp/leak'), os.path.exists('leak'), os.environ.get('LEAK'))\n"
        "open('/tmp/leak', 'w').write('x'); open('leak', 'w').write('x')\n"
        "os.environ['LEAK'] = '1'\n"
    )
    async with SandboxPool(CONFIG, min_warm=2, max_procs=4) as pool:
        await until(lambda: pool.stats().num_parked == 2)
        first = await pool.run(SandboxRequest(code=leak))
        await until(lambda: pool.stats().num_parked == 2)
        second = await pool.run(SandboxRequest(code=leak))
        stats = pool.stats()
    assert first.stdout == second.stdout == "False False None\n"
    assert stats.num_warm_starts == 2
    assert stats.num_cold_starts == 0


async def test_pool_scales_with_demand_within_bounds() -> None:
    async with SandboxPool(CONFIG, min_warm=1, max_procs=3) as pool:
        await until(lambda: pool.stats().num_parked == 1)
        pool.set_demand(10)
        assert pool.target_parked == 3
        await until(lambda: pool.stats().num_parked == 3)
        pool.set_demand(0)
        await until(lambda: pool.stats().num_parked == 1)


async def test_running_calls_never_exceed_max_procs() -> None:
    max_running = 0

    async with SandboxPool(CONFIG, min_warm=0, max_procs=2) as pool:

        async def sample() -> None:
            nonlocal max_running
            while True:
                max_running = max(max_running, pool.stats().num_running)
                await asyncio.sleep(0.005)

        sampler = asyncio.create_task(sample())
        code = "import time; time.sleep(0.2); print('done')"
        results = await asyncio.gather(*(pool.run(SandboxRequest(code=code)) for _ in range(5)))
        sampler.cancel()
    assert [result.stdout for result in results] == ["done\n"] * 5
    assert 1 <= max_running <= 2


async def test_an_adversarial_call_does_not_hurt_the_next() -> None:
    async with SandboxPool(CONFIG, min_warm=1, max_procs=2) as pool:
        bomb = await pool.run(SandboxRequest(code="block = bytearray(8 << 30)"))
        after = await pool.run(SandboxRequest(code="print('fine')"))
    assert bomb.status == "killed"
    assert after.stdout == "fine\n"


async def test_broken_interpreter_gives_a_clear_error() -> None:
    config = SandboxConfig(isolation="process", python_executable="/nonexistent/python")
    async with SandboxPool(config, min_warm=0, max_procs=1) as pool:
        with pytest.raises(SandboxError, match="cannot start sandbox process"):
            await pool.run(SandboxRequest(code="print(1)"))


def test_pool_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="min_warm"):
        SandboxPool(CONFIG, min_warm=3, max_procs=2)
