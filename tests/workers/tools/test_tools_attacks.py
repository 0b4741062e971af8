"""Attacks the sandbox must hold against at each level it claims them: the network through a
child process (the process level's block must hold for children), and world-readable host
files (an isolated level shows the call only what it needs: the system folders, the Python
runtime, a private scratch)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from heddle.workers.tools.isolation import Isolation, process_isolation
from heddle.workers.tools.limits import SandboxConfig, SandboxLimits
from heddle.workers.tools.sandbox_calls import run_once
from heddle.workers.tools.sandbox_protocol import SandboxRequest, SandboxResult

CONFIG = SandboxConfig(limits=SandboxLimits(timeout_s=20.0, max_cpu_s=10.0, max_processes=16))
CHECKOUT = Path(__file__).resolve().parents[3]
"""The repository root: world-readable host files no call needs (``.git/config``,
``pyproject.toml``)."""


async def run(code: str, isolation: Isolation) -> SandboxResult:
    return await run_once(SandboxRequest(code=code), CONFIG, isolation)


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def _connect_code(port: int) -> str:
    return (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('refused', type(exc).__name__)\n"
    )


def _through_a_child(code: str) -> str:
    """``code`` run by a fresh interpreter the call starts (no audit hook of ours in it)."""
    return (
        "import subprocess, sys\n"
        f"done = subprocess.run([sys.executable, '-I', '-c', {code!r}], capture_output=True,"
        " text=True)\n"
        "print(done.stdout.strip() or done.stderr.strip()[-300:])\n"
    )


async def test_the_process_level_blocks_the_network_of_child_processes(
    listening_port: int,
) -> None:
    isolation = process_isolation()
    result = await run(_through_a_child(_connect_code(listening_port)), isolation)
    assert result.status == "ok", result.stderr
    assert result.stdout.startswith("refused"), result.stdout
    assert isolation.blocks_network


async def test_the_process_level_blocks_raw_sockets_too(listening_port: int) -> None:
    """ctypes straight to libc's socket(2) and connect(2): no Python audit event fires."""
    code = (
        "import ctypes, socket, struct\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)\n"
        "if fd < 0:\n"
        "    print('refused errno', ctypes.get_errno())\n"
        "else:\n"
        f"    address = struct.pack('!HH4s8x', socket.AF_INET, {listening_port},"
        " socket.inet_aton('127.0.0.1'))\n"
        "    address = struct.pack('=H', socket.AF_INET) + address[2:]\n"
        "    connected = libc.connect(fd, address, len(address)) == 0\n"
        "    print('connected' if connected else 'refused connect')\n"
    )
    result = await run(code, process_isolation())
    assert result.status == "ok", result.stderr
    assert result.stdout.startswith("refused"), result.stdout


async def test_world_readable_host_files_are_not_visible(confined_isolation: Isolation) -> None:
    """The checkout (its ``.git``, a file in a worktree, and ``pyproject.toml``) and the host's
    home and service folders are world-readable here, and no call needs them."""
    probes = [str(CHECKOUT / ".git"), str(CHECKOUT / "pyproject.toml"), "/home", "/srv"]
    code = (
        "import os\n"
        f"for path in {probes!r}:\n"
        "    try:\n"
        "        seen = len(open(path).read()) if os.path.isfile(path) else os.listdir(path)\n"
        "        print(path, 'read', seen)\n"
        "    except OSError as exc:\n"
        "        print(path, 'denied', exc.strerror)\n"
    )
    result = await run(code, confined_isolation)
    assert result.status == "ok", result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    for path in probes[:2]:
        assert lines[path].startswith("denied"), lines
    for folder in probes[2:]:
        assert lines[folder].startswith("denied") or lines[folder] == "read []", lines


async def test_what_a_call_needs_is_there(confined_isolation: Isolation) -> None:
    """The system's programs and libraries, the runtime's standard library, a scratch dir."""
    code = (
        "import json, os, subprocess, tempfile\n"
        "print(subprocess.run(['sh', '-c', 'echo from-sh'], capture_output=True,"
        " text=True).stdout.strip())\n"
        "print(json.dumps({'ok': True}))\n"
        "with tempfile.NamedTemporaryFile() as handle:\n"
        "    print('scratch', os.path.dirname(handle.name))\n"
    )
    result = await run(code, confined_isolation)
    assert result.status == "ok", result.stderr
    assert result.stdout.splitlines()[:2] == ["from-sh", '{"ok": true}']
