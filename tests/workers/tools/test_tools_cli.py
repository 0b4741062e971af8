"""The `heddle tools` commands, run through the real CLI."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from typer.testing import CliRunner

import heddle.cli.tools  # noqa: F401  (registers the tools commands on the app)
from heddle.bus import Bus, ReplayQuery
from heddle.cli.apps import app
from heddle.config import Settings, load_settings
from heddle.events import PythonTool, ToolCall, ToolReturned
from heddle.events.subjects import trajectory_subject
from heddle.observability.probe import probe_stream
from heddle.workers.tools.isolation import CHILD_SCRIPT, Isolation
from heddle.workers.tools.limits import SandboxConfig
from heddle.workers.tools.sandbox_calls import resolve_isolation

runner = CliRunner()


def test_exec_prints_one_json_object() -> None:
    result = runner.invoke(
        app, ["tools", "exec", "python", "--timeout-s", "5"], input="print(1+1)\n"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "ok"
    assert report["stdout"] == "2\n"
    assert report["exit_code"] == 0
    assert set(report) >= {"status", "exit_code", "stdout", "stderr", "duration_s"}


def test_exec_names_the_isolation_level_it_ran_at() -> None:
    """auto names the level its probe picked; process names itself and what it leaves open."""
    auto = runner.invoke(app, ["tools", "exec", "python"], input="print(1)\n")
    assert auto.exit_code == 0, auto.output
    expected = asyncio.run(resolve_isolation(SandboxConfig()))
    assert json.loads(auto.stdout)["isolation"] == expected.level
    assert json.loads(auto.stdout)["isolation_detail"] == expected.describe()
    process = runner.invoke(
        app,
        ["tools", "exec", "python", "--isolation", "process", "--allow-unisolated"],
        input="print(1)\n",
    )
    report = json.loads(process.stdout)
    assert report["isolation"] == "process"
    assert "UNISOLATED" in report["isolation_detail"]


def test_exec_reports_a_timeout() -> None:
    result = runner.invoke(
        app, ["tools", "exec", "python", "--timeout-s", "0.5"], input="while True: pass\n"
    )
    assert json.loads(result.stdout)["status"] == "timeout"


def test_exec_refuses_empty_input_and_bad_limits() -> None:
    empty = runner.invoke(app, ["tools", "exec", "python"], input="  \n")
    assert empty.exit_code != 0
    assert "no code on stdin" in str(empty.exception)
    bad = runner.invoke(app, ["tools", "exec", "python", "--timeout-s", "-1"], input="print(1)")
    assert "timeout_s must be > 0" in str(bad.exception)


def test_process_isolation_needs_the_explicit_flag() -> None:
    """Unisolated execution is never a default: asked for by name it needs --allow-unisolated."""
    for command in (["tools", "exec", "python"], ["tools", "serve"]):
        refused = runner.invoke(app, [*command, "--isolation", "process"], input="print(1)\n")
        assert refused.exit_code != 0
        assert "--allow-unisolated" in str(refused.exception)
    allowed = runner.invoke(
        app,
        ["tools", "exec", "python", "--isolation", "process", "--allow-unisolated"],
        input="print(1)\n",
    )
    assert json.loads(allowed.stdout)["stdout"] == "1\n"


def test_hidden_paths_are_hidden_from_the_code(bwrap_isolation: Isolation) -> None:
    """A folder outside what a call needs (here, next to this file) does not exist in the
    sandbox; one inside it (here, in the sandbox's own scripts folder, which bwrap shows) is
    shown empty with --hide; a mistyped --hide is refused."""
    outside = Path(tempfile.mkdtemp(prefix="outside-", dir=Path(__file__).parent))
    inside = Path(tempfile.mkdtemp(prefix="hidden-", dir=CHILD_SCRIPT.parent))
    try:
        for secret in (outside, inside):
            secret.chmod(0o755)
            (secret / "executor.creds").write_text("SEED")
        code = f"import os\nprint(os.path.exists({str(outside)!r}), os.listdir({str(inside)!r}))\n"
        command = ["tools", "exec", "python", "--isolation", "bwrap"]
        shown = runner.invoke(app, command, input=code)
        assert json.loads(shown.stdout)["stdout"] == "False ['executor.creds']\n", shown.output
        hidden = runner.invoke(app, [*command, "--hide", str(inside)], input=code)
        assert json.loads(hidden.stdout)["stdout"] == "False []\n", hidden.output
        typo = runner.invoke(app, [*command, "--hide", f"{inside}-typo"], input=code)
        assert "--hide: no such path" in str(typo.exception)
    finally:
        shutil.rmtree(outside, ignore_errors=True)
        shutil.rmtree(inside, ignore_errors=True)


async def test_serve_runs_calls_until_terminated(
    nats_url: str, tmp_path: Path, bwrap_isolation: Isolation
) -> None:
    command = [
        str(Path(sys.executable).with_name("heddle")),
        "--nats-url",
        nats_url,
        "--data-dir",
        str(tmp_path),
        "tools",
        "serve",
        "--min-warm",
        "1",
        "--executor-id",
        "cli-e",
        "--isolation",
        "bwrap",
    ]
    process = await asyncio.create_subprocess_exec(*command, stderr=subprocess.PIPE)
    try:
        async with Bus(load_settings(nats_url=nats_url, data_dir=tmp_path)) as bus:
            await bus.publish(
                ToolCall(
                    command_id="c1",
                    rollout_id="r1",
                    issued_at=0.0,
                    traj_id="t1",
                    step=0,
                    call_id="k1",
                    request=PythonTool(code="print('served')"),
                )
            )
            returned = await _first_result(bus)
        probe = await probe_stream(Settings(nats_url=nats_url, data_dir=tmp_path), [])
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr_bytes = await asyncio.wait_for(process.communicate(), 60)
    stderr = stderr_bytes.decode()
    assert (returned.output, returned.executor_id) == ("served\n", "cli-e")
    assert process.returncode == 0
    assert "stopped: 1 calls done" in stderr
    assert "cli-e: sandbox isolation bwrap (bubblewrap" in stderr
    assert probe is not None
    [registered] = probe.executors
    assert (registered.executor_id, registered.pool, registered.isolation) == (
        "cli-e",
        "default",
        "bwrap",
    )
    assert registered.isolation_detail.startswith("bubblewrap ")


async def _first_result(bus: Bus, within_s: float = 60.0) -> ToolReturned:
    query = ReplayQuery(filter_subjects=(trajectory_subject("r1", "*", "tool_returned"),))
    for _ in range(int(within_s / 0.1)):
        async for record in bus.replay_events(query):
            if isinstance(record.message, ToolReturned):
                return record.message
        await asyncio.sleep(0.1)
    raise AssertionError("no result from the executor")
