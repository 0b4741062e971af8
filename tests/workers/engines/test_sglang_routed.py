"""The engine behind a real ``sglang-router``: generations go through the router (which picks
the server), an abort reaches the server that runs the request although the router does not
route ``/abort_request``, and no warm-up is sent behind a router."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sglang_double import DoubleConfig, SglangDouble, poll_until

from heddle.rollout.router import RouterProcess, RouterSpec
from heddle.workers.engines import create_engine
from heddle.workers.engines.base import GenerationRequest
from heddle.workers.engines.sglang.engine import SglangEngine

pytest.importorskip("sglang_router.launch_router", reason="sglang-router (a dev extra) is missing")


@pytest.fixture
async def routed(tmp_path: Path) -> AsyncIterator[tuple[SglangEngine, list[SglangDouble]]]:
    doubles = [SglangDouble(DoubleConfig(tokens_per_s=300.0)).start() for _ in range(2)]
    router = RouterProcess(
        RouterSpec.on_free_ports("round_robin", tuple(d.url for d in doubles)),
        tmp_path / "router.log",
    )
    await router.start()
    engine = create_engine("sglang", {"url": doubles[0].url, "router-url": router.spec.url})
    assert isinstance(engine, SglangEngine)
    await engine.start()
    try:
        yield engine, doubles
    finally:
        await engine.close()
        assert await router.stop() is not None
        for double in doubles:
            double.stop()


def request(index: int, num_tokens: int) -> GenerationRequest:
    return GenerationRequest(
        request_id=f"q{index}", trajectory_id=f"t{index}", input_token_ids=[5, 6, 7 + index],
        max_new_tokens=num_tokens, target_output_tokens=num_tokens,
    )  # fmt: skip


async def test_generations_go_through_the_router_to_both_servers(
    routed: tuple[SglangEngine, list[SglangDouble]],
) -> None:
    engine, doubles = routed
    results = [await engine.generate(request(i, 4)) for i in range(4)]
    assert all(len(result.output_token_ids) == 4 for result in results)
    assert [len(d.bodies) for d in doubles] == [2, 2]  # round robin: the router picked
    assert engine.capabilities.extras["router"].startswith("http://127.0.0.1:")


async def test_an_abort_reaches_the_server_the_router_picked(
    routed: tuple[SglangEngine, list[SglangDouble]],
) -> None:
    engine, doubles = routed
    await engine.generate(request(0, 2))  # the next request goes to the other server
    task = asyncio.create_task(engine.generate(request(1, 20_000)))
    await poll_until(lambda: any(d.scheduler.running for d in doubles), what="running")
    await engine.abort("q1")
    result = await asyncio.wait_for(task, 30)
    assert result.finish_reason == "abort" and len(result.output_token_ids) < 20_000
    warmed = await engine.warm_up("t9", [1, 2, 3])
    assert warmed.num_prompt_tokens - warmed.num_cached_tokens == 0  # nothing prefilled
    assert [len(d.bodies) for d in doubles] == [1, 1]  # q1 ran on the other server; no warm-up
