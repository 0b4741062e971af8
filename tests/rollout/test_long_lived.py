"""The long-lived path, as a user runs it: `heddle up` with local sim workers, then `rollout
submit`, `rollout run --attach` and `rollout cancel` from other processes, `heddle status` to see
the outcome, and Ctrl-C (SIGINT) to stop the control plane cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from heddle.bus.server import EmbeddedNatsServer

SHORT = {
    "prompt_tokens": 50,
    "steps": [{"output_tokens": 40, "tool_s": 0.5}, {"output_tokens": 30}],
}
LONG = {"prompt_tokens": 50, "steps": [{"output_tokens": 4000, "tool_s": 30.0}] * 20}


def _trace(path: Path, prefix: str, shape: dict[str, object], count: int) -> Path:
    path.write_text(
        "".join(json.dumps({"id": f"{prefix}{i}", **shape}) + "\n" for i in range(count))
    )
    return path


class Heddle:
    """Runs ``heddle`` commands against one NATS server and data dir."""

    def __init__(self, url: str, data_dir: Path) -> None:
        self.prefix = [sys.executable, "-m", "heddle.cli", "--nats-url", url]
        self.prefix += ["--data-dir", str(data_dir)]
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.prefix, *args], env=self.env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip

    def run(self, *args: str, timeout_s: float = 120) -> str:
        done = subprocess.run(
            [*self.prefix, *args], env=self.env, text=True, capture_output=True, timeout=timeout_s
        )
        assert done.returncode == 0, (args, done.stderr[-2000:])
        return done.stdout


def _wait_ready(process: subprocess.Popen[str], timeout_s: float = 120) -> None:
    assert process.stderr is not None
    deadline = time.monotonic() + timeout_s
    seen = ""
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        seen += line
        if "Ctrl-C stops" in seen:
            return
    raise AssertionError(f"heddle up never became ready:\n{seen[-2000:]}")


@pytest.fixture
def served(nats_server: EmbeddedNatsServer, tmp_path: Path) -> Iterator[Heddle]:
    heddle = Heddle(nats_server.url, tmp_path / "data")
    up = heddle.popen("up", "--workers", "2", "--engine", "sim", "--time-scale", "100")
    try:
        _wait_ready(up)
        yield heddle
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=60) == 0  # Ctrl-C: a clean stop
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


@pytest.mark.slow
def test_submit_attach_cancel_against_a_running_control_plane(
    served: Heddle, tmp_path: Path
) -> None:
    short = _trace(tmp_path / "short.jsonl", "a", SHORT, 6)
    submitted = json.loads(served.run("rollout", "submit", str(short), "--json"))
    assert submitted["num_trajectories"] == 6

    attached = json.loads(
        served.run("rollout", "run", "--attach", "--trace", str(short), "--json", "--quiet")
    )
    assert attached["num_completed"] == 6

    long = _trace(tmp_path / "long.jsonl", "b", LONG, 4)
    cancelled_id = served.run("rollout", "submit", str(long)).strip()
    assert served.run("rollout", "cancel", cancelled_id).strip() == f"cancelled {cancelled_id}"

    deadline = time.monotonic() + 60
    while True:
        status = json.loads(served.run("status", "--json", "--no-nats"))
        states = {r["rollout_id"]: r for r in status["rollouts"]}
        first, cancelled = states.get(submitted["rollout_id"]), states.get(cancelled_id)
        if (
            first
            and cancelled
            and first["status"] == "finished"
            and cancelled["status"] == "cancelled"
        ):
            break
        assert time.monotonic() < deadline, states
        time.sleep(0.5)
    assert first["num_completed"] == 6 and first["num_failed"] == 0
    assert cancelled["num_completed"] == 0
