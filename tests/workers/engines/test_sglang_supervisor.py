"""The server supervisor and launcher, with the protocol double as the supervised "server"
(a real child process): this tests the supervisor, not SGLang."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sglang_double import poll_until

from heddle.bus.server import free_port
from heddle.workers.engines import create_engine
from heddle.workers.engines.base import GenerationRequest
from heddle.workers.engines.options import parse_options
from heddle.workers.engines.sglang.client import ClientTimeouts, SglangClient
from heddle.workers.engines.sglang.launcher import (
    NEVER_PREEMPT_THRESHOLD,
    LaunchedSglangEngine,
    LaunchSpec,
    launch_spec,
)
from heddle.workers.engines.sglang.options import SglangEngineOptions
from heddle.workers.engines.sglang.supervisor import (
    ServerSupervisor,
    SupervisorConfig,
    SupervisorError,
    SupervisorState,
)

DOUBLE = Path(__file__).with_name("sglang_double.py")


def double_command(port: int, *extra: str) -> tuple[str, ...]:
    return (sys.executable, str(DOUBLE), "--port", str(port), *extra)


def fast_config(command: tuple[str, ...], tmp_path: Path, **overrides: object) -> SupervisorConfig:
    values: dict[str, object] = {
        "command": command,
        "ready_timeout_s": 30.0,
        "poll_interval_s": 0.05,
        "liveness_interval_s": 0.1,
        "max_probe_failures": 2,
        "max_restarts": 3,
        "restart_backoff_initial_s": 0.05,
        "restart_backoff_max_s": 0.2,
        "stop_timeout_s": 5.0,
        "log_path": tmp_path / "server.log",
        **overrides,
    }
    return SupervisorConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
async def client() -> AsyncIterator[SglangClient]:
    port = free_port()
    async with SglangClient(
        f"http://127.0.0.1:{port}", timeouts=ClientTimeouts(connect_s=1.0, control_s=1.0)
    ) as sglang:
        yield sglang


def port_of(client: SglangClient) -> int:
    return int(client.base_url.rsplit(":", 1)[1])


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_start_waits_for_readiness_and_stop_ends_the_child(
    client: SglangClient, tmp_path: Path
) -> None:
    command = double_command(port_of(client), "--startup-delay-s", "0.3")
    supervisor = ServerSupervisor(fast_config(command, tmp_path), client.is_ready)
    await supervisor.start()
    pid = supervisor.pid
    assert pid is not None and supervisor.state is SupervisorState.READY
    assert await client.is_ready()
    await supervisor.stop()
    assert supervisor.state is SupervisorState.STOPPED
    await poll_until(lambda: not is_alive(pid), what="the child to exit")


async def test_a_crashed_server_is_restarted_and_serves_again(
    client: SglangClient, tmp_path: Path
) -> None:
    supervisor = ServerSupervisor(
        fast_config(double_command(port_of(client)), tmp_path), client.is_ready
    )
    async with supervisor:
        first_pid = supervisor.pid
        assert first_pid is not None
        os.kill(first_pid, signal.SIGKILL)
        await poll_until(lambda: supervisor.num_restarts == 1, what="a restart")
        await supervisor.wait_ready(timeout_s=30)
        assert supervisor.pid not in (None, first_pid)
        assert (await client.loads()).loads


async def test_a_hung_server_fails_its_probes_and_is_replaced(
    client: SglangClient, tmp_path: Path
) -> None:
    supervisor = ServerSupervisor(
        fast_config(double_command(port_of(client)), tmp_path), client.is_ready
    )
    async with supervisor:
        hung_pid = supervisor.pid
        assert hung_pid is not None
        os.kill(hung_pid, signal.SIGSTOP)
        await poll_until(lambda: supervisor.num_restarts == 1, what="a restart")
        await supervisor.wait_ready(timeout_s=30)
        await poll_until(lambda: not is_alive(hung_pid), what="the hung child to be killed")


async def test_a_server_that_keeps_crashing_ends_failed(
    client: SglangClient, tmp_path: Path
) -> None:
    command = double_command(port_of(client), "--exit-after-s", "0.3")
    supervisor = ServerSupervisor(fast_config(command, tmp_path, max_restarts=2), client.is_ready)
    await supervisor.start()
    try:
        await poll_until(
            lambda: supervisor.state is SupervisorState.FAILED, what="FAILED", timeout_s=60
        )
        assert supervisor.num_restarts == 2
        with pytest.raises(SupervisorError, match="crashed 3 times"):
            await supervisor.wait_ready(timeout_s=5)
    finally:
        await supervisor.stop()


async def test_a_server_that_dies_at_start_reports_its_exit_code_and_log(
    client: SglangClient, tmp_path: Path
) -> None:
    command = (sys.executable, "-c", "import sys; print('CUDA out of memory'); sys.exit(3)")
    supervisor = ServerSupervisor(fast_config(command, tmp_path), client.is_ready)
    with pytest.raises(SupervisorError, match=r"code 3(.|\n)*CUDA out of memory"):
        await supervisor.start()
    assert supervisor.state is SupervisorState.STOPPED


async def test_a_server_that_never_gets_ready_times_out(
    client: SglangClient, tmp_path: Path
) -> None:
    command = double_command(port_of(client), "--startup-delay-s", "600")
    supervisor = ServerSupervisor(
        fast_config(command, tmp_path, ready_timeout_s=1.0), client.is_ready
    )
    with pytest.raises(SupervisorError, match="not ready after"):
        await supervisor.start()
    assert supervisor.pid is None


def test_the_launch_command_carries_model_tp_port_gpu_and_the_engine_models_flags() -> None:
    spec = LaunchSpec(
        model_path="/models/qwen3-8b",
        tp_size=2,
        port=30001,
        base_gpu_id=2,
        preemption_threshold=3,
        extra_args=("--mem-fraction-static", "0.8"),
        python="/usr/bin/python3",
    )
    assert spec.command() == (
        "/usr/bin/python3", "-m", "sglang.launch_server",
        "--model-path", "/models/qwen3-8b", "--tp-size", "2", "--host", "127.0.0.1",
        "--port", "30001", "--base-gpu-id", "2", "--enable-priority-scheduling",
        "--schedule-policy", "fcfs", "--priority-scheduling-preemption-threshold", "3",
        "--radix-eviction-policy", "lru", "--page-size", "1",
        "--mem-fraction-static", "0.8",
    )  # fmt: skip
    assert spec.base_url == "http://127.0.0.1:30001"


@pytest.mark.parametrize(
    ("options", "threshold"),
    [
        ({"preemption-threshold": "2.4", "priority-scale": "10"}, 24),
        ({"preemptive": "false", "preemption-threshold": "2.4"}, NEVER_PREEMPT_THRESHOLD),
    ],
)
def test_the_servers_preemption_threshold_follows_the_engines(
    options: dict[str, str], threshold: int
) -> None:
    parsed = parse_options(SglangEngineOptions, {"launch": "true", "model": "m", **options})
    assert launch_spec(parsed).preemption_threshold == threshold


FAKE_LAUNCH_SERVER = """
from sglang_double import main
main()  # SGLang's flags for what the double models; any other flag fails, as in SGLang
"""


def fake_sglang_python(tmp_path: Path) -> Path:
    """An interpreter wrapper whose ``-m sglang.launch_server`` runs the double."""
    package = tmp_path / "fake" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(FAKE_LAUNCH_SERVER)
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


async def test_a_launching_engine_starts_serves_and_stops_its_server(tmp_path: Path) -> None:
    engine = create_engine(
        "sglang",
        {
            "launch": "true",
            "model": "/models/fake-7b",
            "tp": "2",
            "python": str(fake_sglang_python(tmp_path)),
            "log-path": str(tmp_path / "sglang.log"),
            "ready-timeout-s": "30",
            "preemptive": "false",
        },
    )
    assert isinstance(engine, LaunchedSglangEngine)
    await engine.start()
    try:
        assert engine.capabilities.model == "/models/fake-7b"
        assert engine.capabilities.tp_degree == 2
        async with httpx.AsyncClient(base_url=engine.client.base_url) as http:
            info = (await http.get("/server_info")).json()
        assert info["enable_priority_scheduling"] and info["radix_eviction_policy"] == "lru"
        assert info["priority_scheduling_preemption_threshold"] == NEVER_PREEMPT_THRESHOLD
        request = GenerationRequest(
            request_id="r1", trajectory_id="t1", input_token_ids=[1, 2, 3], max_new_tokens=4
        )
        assert len((await engine.generate(request)).output_token_ids) == 4
        pid = engine.supervisor.pid
    finally:
        await engine.close()
    assert pid is not None
    await poll_until(lambda: not is_alive(pid), what="the launched server to exit")


REAL_MODEL = os.environ.get("HEDDLE_SGLANG_MODEL", "")


@pytest.mark.gpu
@pytest.mark.timeout(1800)
@pytest.mark.skipif(
    not REAL_MODEL, reason="set HEDDLE_SGLANG_MODEL (deploy/gpu_check.sh) to launch real SGLang"
)
async def test_launching_a_real_sglang_server(tmp_path: Path) -> None:
    engine = create_engine(
        "sglang",
        {
            "launch": "true",
            "model": REAL_MODEL,
            "tp": os.environ.get("HEDDLE_SGLANG_TP", "1"),
            "launch-args": os.environ.get("HEDDLE_SGLANG_LAUNCH_ARGS", ""),
            "log-path": str(tmp_path / "sglang.log"),
            "ready-timeout-s": "1500",
        },
    )
    assert isinstance(engine, LaunchedSglangEngine)
    await engine.start()
    try:
        assert engine.capabilities.extras["priority_scheduling"] == "true"
        request = GenerationRequest(
            request_id="r1",
            trajectory_id="t1",
            input_token_ids=[101, 102, 103, 104],
            max_new_tokens=8,
            target_output_tokens=8,
        )
        result = await engine.generate(request)
        assert len(result.output_token_ids) == 8 == len(result.output_logprobs)
        pid = engine.supervisor.pid
    finally:
        await engine.close()
    assert pid is not None
    await poll_until(lambda: not is_alive(pid), what="SGLang to exit", timeout_s=120)
