"""The bwrap level as a pod runs it (rootless), and the rule that isolation never weakens
silently: ``auto`` refuses to fall back to process isolation unless allowed.

The rootless runs start bwrap as ``nobody`` through ``setpriv`` (this machine's tests run as
root) with a Python ``nobody`` can execute and a copy of the child script it can read: the
sandbox then holds exactly what an unprivileged executor in a pod would get. They count as the
``bwrap-rootless`` level for ``HEDDLE_REQUIRE_ISOLATION``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from heddle.workers.tools import sandbox_calls
from heddle.workers.tools.bwrap import bwrap_arguments
from heddle.workers.tools.isolation import CHILD_FILES, CHILD_SCRIPT, Isolation, bwrap_candidate
from heddle.workers.tools.limits import SandboxConfig, SandboxLimits
from heddle.workers.tools.sandbox import SandboxError, SandboxRequest, SandboxResult
from heddle.workers.tools.sandbox_calls import resolve_isolation, run_once
from heddle.workers.tools.sandbox_mounts import hidden_ancestor

NOBODY = 65534
ROOTLESS = "bwrap-rootless"
LIMITS = SandboxLimits(timeout_s=10.0, max_cpu_s=5.0, max_memory_bytes=512 << 20)


@dataclasses.dataclass(frozen=True, slots=True)
class AsNobody(Isolation):
    """bwrap isolation launched by ``nobody`` instead of this (root) process."""

    child_script: str = ""
    """A copy of the child script that ``nobody`` can read."""

    def launch_command(self, python: str, status_fd: int, scratch_bytes: int) -> list[str]:
        drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        command = Isolation.launch_command(self, python, status_fd, scratch_bytes)
        return [*drop, *(self.child_script if arg == str(CHILD_SCRIPT) else arg for arg in command)]


def _reachable_by_others(path: str) -> bool:
    return os.access(path, os.X_OK) and hidden_ancestor(os.path.realpath(path)) is None


def python_for_nobody() -> str | None:
    """An interpreter ``nobody`` can run (this one when its folders are open to others)."""
    candidates = (os.path.realpath(sys.executable), "/usr/local/bin/python3", "/usr/bin/python3")
    return next((path for path in candidates if _reachable_by_others(path)), None)


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A folder ``nobody`` can reach, next to this file (outside every tmpfs the sandbox
    mounts); removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="bwrap-test-", dir=Path(__file__).parent))
    folder.chmod(0o755)
    for parent in folder.parents:
        if not parent.stat().st_mode & 0o001:
            pytest.skip(f"{parent} is not traversable by nobody")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


Unavailable = Callable[[str, str], None]


@pytest.fixture(scope="module")
def rootless(isolation_unavailable: Unavailable) -> Iterator[tuple[Isolation, SandboxConfig]]:
    unavailable = isolation_unavailable
    base = bwrap_candidate()
    python = python_for_nobody()
    if base is None or os.geteuid() != 0 or not shutil.which("setpriv"):
        unavailable(ROOTLESS, "needs bwrap, and root with setpriv to test the rootless case")
    if python is None:
        unavailable(ROOTLESS, "no Python interpreter that user nobody can run")
    assert base is not None and python is not None
    folder = tempfile.mkdtemp(prefix="heddle-rootless-")
    os.chmod(folder, 0o755)
    for path in CHILD_FILES:
        shutil.copy(path, folder)
    script = Path(folder) / CHILD_SCRIPT.name
    fields = {field.name: getattr(base, field.name) for field in dataclasses.fields(Isolation)}
    # The copy's folder is under /tmp, which the sandbox covers: bind it back like a runtime.
    fields |= {"rootless": True, "drops_privileges": False, "runtime_dirs": (folder,)}
    isolation = AsNobody(**fields, child_script=str(script))
    try:
        yield isolation, SandboxConfig(limits=LIMITS, python_executable=python)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _run(isolation: Isolation, config: SandboxConfig, code: str) -> SandboxResult:
    return await run_once(SandboxRequest(code=code), config, isolation)


async def test_rootless_sandbox_has_no_network_no_host_processes(
    rootless: tuple[Isolation, SandboxConfig],
) -> None:
    isolation, config = rootless
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        code = (
            "import os, socket\n"
            f"print(socket.socket().connect_ex(('127.0.0.1', {server.getsockname()[1]})) != 0)\n"
            "print(os.getuid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        )
        result = await _run(isolation, config, code)
    assert result.status == "ok", result.stderr
    refused, ids = result.stdout.splitlines()
    assert refused == "True"
    uid, pids = ids.split(maxsplit=1)
    assert int(uid) == NOBODY
    assert pids == "[1, 2, 3]"


async def test_rootless_sandbox_cannot_write_the_host_or_see_hidden_paths(
    rootless: tuple[Isolation, SandboxConfig], reachable_dir: Path
) -> None:
    """A world-writable host folder stays unwritten (read-only root); a folder the executor's
    user can read, like a pod's mounted credential, is empty when hidden."""
    isolation, config = rootless
    hidden_dir = reachable_dir / "creds"
    hidden_dir.mkdir(mode=0o755)
    (hidden_dir / "executor.creds").write_text("SECRET-SEED")
    (hidden_dir / "executor.creds").chmod(0o644)
    isolation = dataclasses.replace(isolation, hidden_paths=(str(hidden_dir),))
    open_dir = reachable_dir / "world-writable"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    code = (
        "import os\n"
        f"print(os.listdir({str(hidden_dir)!r}))\n"
        f"for path in [{str(open_dir / 'escape.txt')!r}, '/tmp/escape.txt']:\n"
        "    try:\n"
        "        open(path, 'w').write('escaped')\n"
        "        print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print('denied', path)\n"
    )
    result = await _run(isolation, config, code)
    assert result.status == "ok", result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "[]", "the hidden folder is an empty tmpfs in the sandbox"
    assert f"denied {open_dir / 'escape.txt'}" in lines
    assert not _exists(open_dir / "escape.txt")
    assert not _exists(Path("/tmp/escape.txt"))


async def test_rootless_sandbox_reaps_escaped_children(
    rootless: tuple[Isolation, SandboxConfig],
) -> None:
    """A daemonised child (setsid + double fork) dies with the sandbox's PID namespace."""
    isolation, config = rootless
    marker = f"heddle-escape-{os.getpid()}"
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['/bin/sleep', '300', {marker!r}])\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\n"
    )
    result = await _run(isolation, config, code)
    assert result.status == "ok", result.stderr
    assert not _processes_naming(marker)


def _exists(path: Path) -> bool:
    return path.exists()


def _processes_naming(marker: str) -> list[str]:
    return [e.name for e in Path("/proc").iterdir() if e.name.isdigit() and marker in _cmdline(e)]


def _cmdline(entry: Path) -> str:
    try:
        return (entry / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_bwrap_arguments_cover_hidden_files_and_keep_root_capabilities_minimal(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "one.creds"
    secret.write_text("x")
    args = bwrap_arguments(
        "/usr/bin/bwrap",
        rootless=False,
        runtime_dirs=(),
        hidden_paths=(str(tmp_path), str(secret)),
        scratch_bytes=1 << 20,
    )
    assert args[args.index(str(tmp_path)) - 1] == "--tmpfs"
    assert args[args.index(str(secret)) - 1] == "/dev/null"
    added = [args[i + 1] for i, arg in enumerate(args) if arg == "--cap-add"]
    assert sorted(added) == ["CAP_CHOWN", "CAP_SETGID", "CAP_SETUID"]
    assert "--unshare-user" not in args
    rootless_args = bwrap_arguments(
        "/usr/bin/bwrap", rootless=True, runtime_dirs=(), hidden_paths=(), scratch_bytes=1
    )
    assert "--unshare-user" in rootless_args and "--cap-add" not in rootless_args


async def test_auto_refuses_to_run_unisolated_unless_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no isolated level available, ``auto`` is an error naming each level's problem;
    ``allow_unisolated`` turns it into process isolation."""
    monkeypatch.setattr(sandbox_calls, "namespace_candidate", lambda: None)
    monkeypatch.setattr(sandbox_calls, "bwrap_candidate", lambda hidden: None)
    with pytest.raises(SandboxError, match=r"namespace: .*bwrap: .*--allow-unisolated"):
        await resolve_isolation(SandboxConfig())
    allowed = await resolve_isolation(SandboxConfig(allow_unisolated=True))
    assert allowed.level == "process" and not allowed.is_isolated
    assert "UNISOLATED" in allowed.describe()


async def test_auto_takes_the_first_isolated_level_that_works(
    isolation_unavailable: Unavailable,
) -> None:
    try:
        isolation = await resolve_isolation(SandboxConfig())
    except SandboxError as exc:
        isolation_unavailable("bwrap", str(exc))
    assert isolation.level == ("namespace" if os.geteuid() == 0 else "bwrap")
