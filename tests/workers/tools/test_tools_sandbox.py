"""The sandbox against ordinary and adversarial model code (real processes, real limits)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from waiting import until

from heddle.workers.tools.isolation import Isolation
from heddle.workers.tools.limits import SandboxConfig, SandboxLimits
from heddle.workers.tools.sandbox_calls import run_once
from heddle.workers.tools.sandbox_mounts import runtime_dirs
from heddle.workers.tools.sandbox_protocol import SandboxMode, SandboxRequest, SandboxResult

LIMITS = SandboxLimits(
    timeout_s=10.0,
    max_cpu_s=5.0,
    max_memory_bytes=512 << 20,
    max_processes=16,
    max_output_bytes=4096,
)
CONFIG = SandboxConfig(limits=LIMITS)


async def run(
    code: str,
    isolation: Isolation,
    *,
    timeout_s: float | None = None,
    mode: SandboxMode = "python",
    files: dict[str, str] | None = None,
) -> SandboxResult:
    request = SandboxRequest(code=code, mode=mode, files=files or {}, timeout_s=timeout_s)
    return await run_once(request, CONFIG, isolation)


async def test_snippet_output_and_exit_code(any_isolation: Isolation) -> None:
    result = await run("print(1+1)", any_isolation)
    assert (result.status, result.exit_code, result.stdout, result.stderr) == ("ok", 0, "2\n", "")


async def test_exception_is_an_error_with_the_models_traceback(any_isolation: Isolation) -> None:
    result = await run("x = 1\n1 / 0\n", any_isolation)
    assert (result.status, result.exit_code) == ("error", 1)
    assert 'File "<snippet>", line 2' in result.stderr
    assert "ZeroDivisionError" in result.stderr
    assert "sandbox_child" not in result.stderr


async def test_system_exit_code_is_reported(any_isolation: Isolation) -> None:
    result = await run("import sys; print('bye'); sys.exit(3)", any_isolation)
    assert (result.status, result.exit_code, result.stdout) == ("error", 3, "bye\n")


async def test_infinite_loop_times_out(any_isolation: Isolation) -> None:
    result = await run("while True:\n    pass\n", any_isolation, timeout_s=1.0)
    assert result.status == "timeout"
    assert result.exit_code is None


async def test_sleeping_child_processes_die_with_the_call(any_isolation: Isolation) -> None:
    code = "import subprocess\nsubprocess.Popen(['sleep', '60'])\nprint('started', flush=True)\n"
    # The call must get to 'started' before its timeout: seconds on a loaded machine.
    result = await run(code + "import time; time.sleep(60)\n", any_isolation, timeout_s=8.0)
    assert result.status == "timeout"
    assert result.stdout == "started\n"


async def test_cpu_limit_kills(any_isolation: Isolation) -> None:
    config = SandboxConfig(limits=SandboxLimits(max_cpu_s=1.0, timeout_s=30.0))
    result = await run_once(SandboxRequest(code="while True: pass"), config, any_isolation)
    assert result.status == "killed"
    assert "CPU-time limit" in result.reason


async def test_large_allocation_is_killed(any_isolation: Isolation) -> None:
    result = await run("block = bytearray(4 << 30)\nprint('allocated')", any_isolation)
    assert result.status == "killed"
    assert "memory limit" in result.reason
    assert result.stdout == ""


async def test_huge_output_is_truncated(any_isolation: Isolation) -> None:
    result = await run("import sys\nsys.stdout.write('x' * 10_000_000)\n", any_isolation)
    assert result.status == "ok"
    assert result.stdout.startswith("x" * LIMITS.max_output_bytes + "\n[output truncated")
    assert result.num_dropped_bytes == 10_000_000 - LIMITS.max_output_bytes


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A host port that accepts connections, so only isolation can make a connect fail."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


async def test_socket_to_localhost_fails(any_isolation: Isolation, listening_port: int) -> None:
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {listening_port}), timeout=2)\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('refused', type(exc).__name__)\n"
    )
    result = await run(code, any_isolation)
    assert result.status == "ok"
    assert result.stdout.startswith("refused")


async def test_fork_bomb_is_contained(confined_isolation: Isolation) -> None:
    """RLIMIT_NPROC on the call's own uid stops it; the PID namespace reaps what is left."""
    code = "import os\nprint(os.getuid(), flush=True)\nwhile True:\n    os.fork()\n"
    result = await run(code, confined_isolation, timeout_s=8.0)
    assert result.status in ("error", "killed", "timeout")
    uid = int(result.stdout.split()[0])
    assert uid >= CONFIG.uid_base
    # The namespace's end kills what is left; the kernel may take a moment to reap it.
    await until(lambda: not _processes_of_uid(uid), f"no process of uid {uid} left")
    after = await run("print('still here')", confined_isolation)
    assert after.stdout == "still here\n"


def _exists(path: Path) -> bool:
    return path.exists()


def _processes_of_uid(uid: int) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        if int(uid_line.split()[1]) == uid:
            found.append(entry.name)
    return found


async def test_writes_outside_scratch_fail_or_stay_confined(
    confined_isolation: Isolation, tmp_path: Path
) -> None:
    open_dir = tmp_path / "world-writable"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    repo_file = Path(__file__).with_name("written-by-sandbox.txt")
    code = (
        f"for path in [{str(open_dir / 'escape.txt')!r}, {str(repo_file)!r}, '/tmp/escape.txt']:\n"
        "    try:\n"
        "        open(path, 'w').write('escaped')\n"
        "        print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print('denied', path, exc.strerror)\n"
        "open('inside.txt', 'w').write('ok')\n"
        "import os; print('scratch', os.getcwd())\n"
    )
    result = await run(code, confined_isolation)
    assert result.status == "ok", result.stderr
    assert f"denied {repo_file}" in result.stdout
    assert not (open_dir / "escape.txt").exists()
    assert not repo_file.exists()
    scratch = result.stdout.split("scratch ")[1].strip()
    assert not _exists(Path(scratch, "inside.txt"))


async def test_process_isolation_removes_its_scratch_dir(tmp_path: Path) -> None:
    from heddle.workers.tools.isolation import process_isolation

    code = "import os\nopen('inside.txt', 'w').write('x')\nprint(os.getcwd())\n"
    result = await run(code, process_isolation())
    assert result.status == "ok"
    assert not _exists(Path(result.stdout.strip()))


async def test_unit_tests_mode_reports_each_test(any_isolation: Isolation) -> None:
    tests = (
        "from solution import add\n"
        "def test_small():\n    assert add(1, 2) == 3\n"
        "def test_negative():\n    assert add(-1, -1) == -2\n"
        "def test_wrong():\n    assert add(2, 2) == 5, 'two and two'\n"
    )
    files = {"solution.py": "def add(a, b):\n    return a + b\n"}
    result = await run(tests, any_isolation, mode="unit_tests", files=files)
    assert result.status == "error"
    assert "PASSED test_small" in result.stdout
    assert "FAILED test_wrong: AssertionError: two and two" in result.stdout
    assert result.stdout.rstrip().endswith("heddle-tests: passed=2 failed=1 total=3")


async def test_unit_tests_collection_failure(any_isolation: Isolation) -> None:
    files = {"solution.py": "def add(a, b)\n    return a + b\n"}
    result = await run("from solution import add\n", any_isolation, mode="unit_tests", files=files)
    assert result.exit_code == 2
    assert "SyntaxError" in result.stderr
    assert "heddle-tests: passed=0 failed=0 total=0" in result.stdout


def test_file_names_must_stay_in_scratch() -> None:
    for name in ("../up.py", "/etc/passwd", ""):
        with pytest.raises(ValueError, match="relative"):
            SandboxRequest(code="", files={name: "x"})
    assert SandboxRequest(code="", files={"pkg/mod.py": "x"}).files == {"pkg/mod.py": "x"}


def test_limits_reject_non_positive_values() -> None:
    with pytest.raises(ValueError, match="max_memory_bytes"):
        SandboxLimits(max_memory_bytes=0)
    assert LIMITS.capped(3.0).timeout_s == 3.0
    assert LIMITS.capped(99.0).timeout_s == LIMITS.timeout_s


async def test_code_runs_unprivileged_in_its_own_namespaces(
    confined_isolation: Isolation,
) -> None:
    code = (
        "import os\n"
        "capabilities = open('/proc/self/status').read().split('CapEff:')[1].split()[0]\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "print(os.getuid(), os.getpid(), int(capabilities, 16), pids)"
    )
    result = await run(code, confined_isolation)
    uid, pid, capabilities, pids = result.stdout.split(maxsplit=3)
    assert int(uid) >= CONFIG.uid_base
    assert int(capabilities) == 0
    # namespace: the waiter is PID 1 and the code 2; bwrap puts its own init first.
    expected = [1, 2] if confined_isolation.level == "namespace" else [1, 2, 3]
    assert int(pid) == expected[-1], "the code runs under the sandbox's waiter"
    assert pids.strip() == str(expected), "the sandbox sees only its own processes"


async def test_root_only_files_and_hidden_dirs_stay_unreadable(
    confined_isolation: Isolation,
) -> None:
    code = (
        "import os\n"
        "for path in ['/etc/shadow', '/root']:\n"
        "    try:\n"
        "        seen = len(open(path).read()) if os.path.isfile(path) else os.listdir(path)\n"
        "        print(path, 'read', seen)\n"
        "    except OSError as exc:\n"
        "        print(path, 'denied', exc.strerror)\n"
    )
    result = await run(code, confined_isolation)
    assert result.status == "ok", result.stderr
    assert "/etc/shadow denied" in result.stdout or not _exists(Path("/etc/shadow"))
    root_line = next(line for line in result.stdout.splitlines() if line.startswith("/root"))
    # Only the Python runtime may show there (bound back read-only when it lives under /root).
    runtime = sorted({path.split("/")[2] for path in runtime_dirs() if path.startswith("/root/")})
    assert "denied" in root_line or root_line == f"/root read {runtime}"
