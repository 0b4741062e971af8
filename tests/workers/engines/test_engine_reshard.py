"""Each engine's re-shard: a generation in flight returns aborted with its output so far, the
engine comes back at the new degree over the new GPUs, with no cached prefix, and serves.

SGLang: there is no GPU here, so the launched "server" is the protocol double started as
``python -m sglang.launch_server`` (``sglang_double.py``): this tests the relaunch logic (the
server stopped, started again with the new ``--tp-size`` over ``CUDA_VISIBLE_DEVICES``), not
SGLang. The torch engine runs its tiny model on the CPU."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path

import pytest
from sglang_double import poll_until

from heddle.workers.engines import create_engine
from heddle.workers.engines.base import Engine, GenerationRequest, Resharder
from heddle.workers.engines.sglang.launcher import LaunchedSglangEngine
from heddle.workers.engines.simulated import SimulatedEngine, SimulatedEngineOptions
from heddle.workers.engines.torch_engine.engine import TorchEngine
from heddle.workers.engines.torch_engine.options import TorchEngineOptions

DOUBLE = Path(__file__).with_name("sglang_double.py")
pytestmark = pytest.mark.timeout(180)


def request(rid: str, num_tokens: int) -> GenerationRequest:
    return GenerationRequest(
        request_id=rid,
        trajectory_id=f"t-{rid}",
        input_token_ids=list(range(1, 40)),
        max_new_tokens=num_tokens,
        target_output_tokens=num_tokens,
    )


async def reshard_while_generating(engine: Engine, num_tokens: int) -> int:
    """Start a long generation, re-shard to TP2 over GPUs 4 and 5 once it produced some, and
    return how many tokens it had produced when it was aborted."""
    assert isinstance(engine, Resharder)
    generation = asyncio.create_task(engine.generate(request("long", num_tokens)))
    await poll_until(lambda: engine_running(engine), what="the generation to start", timeout_s=60)
    await asyncio.sleep(0.5)
    await engine.reshard(2, [4, 5])
    result = await asyncio.wait_for(generation, 60)
    assert result.finish_reason == "abort"
    assert engine.capabilities.tp_degree == 2 and engine.gpu_ids == (4, 5)
    after = await engine.generate(request("after", 8))
    assert len(after.output_token_ids) == 8 and after.num_cached_tokens == 0
    return len(result.output_token_ids)


def engine_running(engine: Engine) -> bool:
    pending = getattr(engine, "_pending", None) or getattr(engine, "_jobs", None)
    return bool(pending)


async def test_the_sim_engine_relaunches_at_the_new_degree() -> None:
    engine = SimulatedEngine(
        SimulatedEngineOptions(model="qwen3-32b", time_scale=20.0, gpu_ids="0")
    )
    await engine.start()
    try:
        capacity = engine.capabilities.max_kv_tokens
        assert engine.gpu_ids == (0,)
        produced = await reshard_while_generating(engine, 5000)
        assert 0 < produced < 5000
        assert engine.capabilities.max_kv_tokens > capacity  # TP2's cache is larger
    finally:
        await engine.close()


async def test_the_torch_engine_restarts_at_the_new_degree() -> None:
    engine = TorchEngine(TorchEngineOptions(model="tiny", gpu_ids="0", max_kv_tokens=8192))
    await engine.start()
    try:
        produced = await reshard_while_generating(engine, 4000)
        assert produced < 4000
    finally:
        await engine.close()


FAKE_LAUNCH_SERVER = """
import json, os, sys
with open({record!r}, "a") as record:
    record.write(json.dumps({{"argv": sys.argv[1:],
                             "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "")}}) + "\\n")
from sglang_double import main
main()
"""


def fake_sglang_python(tmp_path: Path, record: Path) -> Path:
    """An interpreter whose ``-m sglang.launch_server`` records its flags and
    ``CUDA_VISIBLE_DEVICES``, then runs the double."""
    package = tmp_path / "fake" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(FAKE_LAUNCH_SERVER.format(record=str(record)))
    wrapper = tmp_path / "python"
    path = f"{tmp_path / 'fake'}:{DOUBLE.parent}"
    wrapper.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        PYTHONPATH="{path}" exec "{sys.executable}" "$@"
        """)
    )
    wrapper.chmod(0o755)
    return wrapper


async def test_a_launched_sglang_server_is_relaunched_at_the_new_tp_over_the_new_gpus(
    tmp_path: Path,
) -> None:
    record = tmp_path / "launches.jsonl"
    engine = create_engine(
        "sglang",
        {
            "launch": "true",
            "model": "/models/fake-32b",
            "tp": "1",
            "gpu-ids": "3",
            "python": str(fake_sglang_python(tmp_path, record)),
            "launch-args": "--tokens-per-s 200",
            "log-path": str(tmp_path / "sglang.log"),
            "ready-timeout-s": "60",
            "preemptive": "false",
            "stream": "true",
        },
    )
    assert isinstance(engine, LaunchedSglangEngine)
    await engine.start()
    try:
        first_pid = engine.supervisor.pid
        assert engine.gpu_ids == (3,)
        produced = await reshard_while_generating(engine, 2000)
        assert 0 < produced < 2000
        assert engine.supervisor.pid not in (None, first_pid)
    finally:
        await engine.close()
    launches = [json.loads(line) for line in record.read_text().splitlines()]
    assert [launch["gpus"] for launch in launches] == ["3", "4,5"]
    for launch, tp in zip(launches, ("1", "2"), strict=True):
        argv = launch["argv"]
        assert argv[argv.index("--tp-size") + 1] == tp
        assert argv[argv.index("--base-gpu-id") + 1] == "0"
