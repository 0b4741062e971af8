"""The worker's weight gate: a swap waits for running generations, generations that would start
during a pending swap wait for it, and each generation sees exactly one version."""

from __future__ import annotations

import asyncio

import pytest

from heddle.workers.agent.generation import WeightGate


async def test_a_swap_waits_for_running_generations_and_holds_new_ones() -> None:
    gate = WeightGate()
    log: list[str] = []
    release_first = asyncio.Event()

    async def generation(name: str, hold: asyncio.Event | None = None) -> int:
        async with gate.generating() as version:
            log.append(f"{name} starts on v{version}")
            if hold is not None:
                await hold.wait()
            log.append(f"{name} ends")
            return version

    async def load() -> None:
        log.append("load")

    first = asyncio.create_task(generation("first", release_first))
    await asyncio.sleep(0)
    swap = asyncio.create_task(gate.swap(1, load))
    await asyncio.sleep(0)
    second = asyncio.create_task(generation("second"))
    await asyncio.sleep(0.01)
    assert log == ["first starts on v0"]  # the swap waits; the second waits behind it
    release_first.set()
    assert await first == 0 and await second == 1
    await swap
    assert log == ["first starts on v0", "first ends", "load", "second starts on v1", "second ends"]


async def test_a_failed_load_keeps_the_version_served() -> None:
    gate = WeightGate()

    async def broken() -> None:
        raise OSError("no such file")

    with pytest.raises(OSError, match="no such file"):
        await gate.swap(2, broken)
    assert gate.version == 0
    async with gate.generating() as version:  # generations are not blocked after it
        assert version == 0
