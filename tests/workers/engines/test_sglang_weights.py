"""The sglang engine loads weights through ``/update_weights_from_disk`` (against the protocol
double, which models SGLang's answers): the body has SGLang's field names, the next generations
come from the new weights with the radix cache flushed, a refused path keeps the old weights,
and a launched server that crashes is brought back on the weights loaded since its launch."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from double_scheduler import next_token
from sglang_double import DoubleConfig, SglangDouble, poll_until
from test_sglang_supervisor import fake_sglang_python

from heddle.workers.engines import create_engine
from heddle.workers.engines.base import EngineError, GenerationRequest, WeightLoader
from heddle.workers.engines.sglang.client import RetryPolicy, SglangClient
from heddle.workers.engines.sglang.engine import SglangEngine
from heddle.workers.engines.sglang.launcher import LaunchedSglangEngine
from heddle.workers.engines.sglang.options import EngineSettings

PROMPT = [301, 302, 303, 304, 305, 306]


@pytest.fixture
def double() -> Iterator[SglangDouble]:
    with SglangDouble(DoubleConfig(tokens_per_s=2000.0, max_running=4)) as server:
        yield server


def request(request_id: str, trajectory_id: str = "t") -> GenerationRequest:
    return GenerationRequest(request_id=request_id, trajectory_id=trajectory_id,
                             input_token_ids=PROMPT, max_new_tokens=5,
                             target_output_tokens=5)  # fmt: skip


def expected(weights: int) -> list[int]:
    context = list(PROMPT)
    for _ in range(5):
        context.append(next_token(context, DoubleConfig().vocab_size, weights))
    return context[len(PROMPT) :]


async def test_weights_load_from_disk_and_the_next_generations_use_them(
    double: SglangDouble, tmp_path: Path
) -> None:
    client = SglangClient(double.url, retry=RetryPolicy(backoff_initial_s=0.01))
    engine = SglangEngine(client, EngineSettings(max_running=2))
    await engine.start()
    try:
        assert isinstance(engine, WeightLoader)
        assert (await engine.generate(request("a"))).output_token_ids == expected(0)
        await engine.load_weights(str(tmp_path), weight_version=3)
        assert double.weight_updates == [{"model_path": str(tmp_path), "weight_version": "3"}]
        after = await engine.generate(request("b"))
        assert after.output_token_ids == expected(1) != expected(0)
        assert after.num_cached_tokens == 0  # the radix cache was flushed
        with pytest.raises(EngineError, match=r"weights of version 4.*Failed to load weights"):
            await engine.load_weights(str(tmp_path / "missing"), weight_version=4)
        assert (await engine.generate(request("c"))).output_token_ids == expected(1)
    finally:
        await engine.close()


async def test_a_relaunched_server_gets_the_loaded_weights_again(tmp_path: Path) -> None:
    checkpoint = tmp_path / "v1"
    checkpoint.mkdir()
    engine = create_engine("sglang", {
        "launch": "true", "model": "/models/fake-7b", "python": str(fake_sglang_python(tmp_path)),
        "log-path": str(tmp_path / "sglang.log"), "ready-timeout-s": "30",
    })  # fmt: skip
    assert isinstance(engine, LaunchedSglangEngine)
    await engine.start()
    try:
        await engine.load_weights(str(checkpoint), weight_version=1)
        first_pid = engine.supervisor.pid
        assert first_pid is not None
        os.kill(first_pid, signal.SIGKILL)
        await poll_until(lambda: engine.supervisor.num_restarts == 1, what="a restart")
        await engine.supervisor.wait_ready(timeout_s=30)
        async with httpx.AsyncClient(base_url=engine.client.base_url) as http:
            info = (await http.get("/model_info")).json()
        assert info["model_path"] == str(checkpoint)  # re-applied before it served again
        out = await engine.generate(request("after-restart"))
        assert out.output_token_ids == expected(1)
    finally:
        await engine.close()
