"""Launcher children do not outlive a launcher that is killed (the parent-death signal)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")

LAUNCHER = """
import asyncio, sys
from pathlib import Path
from heddle.config import Settings
from heddle.rollout.processes import Launcher

async def main() -> None:
    settings = Settings(nats_url=sys.argv[1], data_dir=Path(sys.argv[2]))
    launcher = Launcher(settings, Path(sys.argv[2]) / "logs")
    child = await launcher.start("tools00", ["tools", "serve", "--executor-id", "tools00"])
    print(child.pid, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    return status != "Z"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_a_child_exits_when_its_launcher_is_killed(nats_url: str, tmp_path: Path) -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, nats_url, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    child_pid = 0
    try:
        assert launcher.stdout is not None
        child_pid = int(launcher.stdout.readline())
        log = tmp_path / "logs" / "tools00.log"
        # Serving, as its log says (a loaded machine takes seconds to get there).
        assert wait_until(lambda: "Ctrl-C stops" in _read(log), 120.0), _read(log)
        assert is_alive(child_pid), _read(log)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(60)
        # SIGTERM from the parent-death signal: it finishes its calls and leaves.
        assert wait_until(lambda: not is_alive(child_pid), 120.0), _read(log)
    finally:
        launcher.kill()
        launcher.wait(60)
        if child_pid and is_alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)
