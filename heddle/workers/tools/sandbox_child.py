"""The sandbox's child process: parked until it gets one call, runs it, reports, exits.

Run as a script (``python -I sandbox_child.py ISOLATION STATUS_FD``): it must start fast and
depend on the standard library only (Heddle imports only its helpers). The executor side is
``heddle.workers.tools.sandbox``; the guarantees are listed in ``heddle.workers.tools``.

Life of one process:
1. Start-up (before any call: this is what the pre-warmed pool pays in advance). In ``namespace``
   isolation the process is PID 1 of fresh PID, network and mount namespaces (made by
   ``unshare``); it remounts ``/`` read-only, puts private size-capped tmpfs mounts on the
   world-writable directories and mounts a ``/proc`` that shows only the sandbox. In ``bwrap``
   isolation bubblewrap did all of that before this script started (``heddle.workers.tools.bwrap``).
2. Park: write ``READY_MARKER`` to the status pipe, then block reading one JSON request from
   stdin until EOF.
3. Fork the *runner*: it lowers rlimits, drops to the call's unprivileged uid (when root), enters
   the scratch directory, writes the request's files, and executes the code. The status pipe is
   closed in the runner, so model code cannot forge the report.
4. The waiter (this process) reaps the runner with ``wait4`` and writes one JSON status record
   (exit code or signal, CPU time, peak RSS) to the status pipe, then exits. In ``namespace``
   isolation its exit makes the kernel kill every process left in the namespace.
"""

from __future__ import annotations

import contextlib
import io
import json
import linecache
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn

if __package__:  # imported by Heddle's modules (for the constants below)
    from heddle.workers.tools.sandbox_mounts import confine_filesystem
    from heddle.workers.tools.sandbox_seccomp import deny_network
else:  # the sandbox's script (python -I keeps this folder off the import path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sandbox_mounts import confine_filesystem  # type: ignore[import-not-found,no-redef]
    from sandbox_seccomp import deny_network  # type: ignore[import-not-found,no-redef]

EXIT_MEMORY_LIMIT = 120
"""Runner exit code meaning "an allocation hit the memory limit" (MemoryError)."""
EXIT_SETUP_FAILED = 121
"""Runner exit code meaning "the sandbox could not be set up" (not the model's fault)."""
READY_MARKER = b"R"
"""Written to the status pipe once the process is set up and parked, before any record."""
NAMESPACE_SCRATCH = "/tmp/sandbox"
SNIPPET_NAME = "<snippet>"
TEST_MODULE = "test_submission"


def _set_limit(kind: int, soft: int, hard: int | None = None) -> None:
    resource.setrlimit(kind, (soft, soft if hard is None else hard))


def apply_limits(limits: dict[str, Any]) -> None:
    """Lower this process's rlimits; the CPU hard limit is one second above the soft one so the
    soft limit's SIGXCPU comes first and names the cause."""
    cpu_s = max(1, int(limits["max_cpu_s"] + 0.999))
    _set_limit(resource.RLIMIT_CPU, cpu_s, cpu_s + 1)
    _set_limit(resource.RLIMIT_AS, limits["max_memory_bytes"])
    _set_limit(resource.RLIMIT_FSIZE, limits["max_file_bytes"])
    _set_limit(resource.RLIMIT_NOFILE, limits["max_open_files"])
    _set_limit(resource.RLIMIT_CORE, 0)
    if limits["max_processes"] > 0:
        _set_limit(resource.RLIMIT_NPROC, limits["max_processes"])


def drop_privileges(uid: int) -> None:
    """Become ``uid`` (group ``uid``, no supplementary groups): no capabilities remain."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def block_sockets() -> None:
    """``process`` isolation's network block in words for Python code: refuse socket creation
    and use with a clear error. The boundary is the seccomp filter (``deny_network``), which
    holds for C code and child processes too; this hook only names the cause."""

    def refuse(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith("socket.") and event != "socket.gethostname":
            raise PermissionError(f"network access is disabled in the sandbox ({event})")

    sys.addaudithook(refuse)


def write_files(files: dict[str, str]) -> None:
    """Write the request's files under the current directory; names must stay inside it."""
    for name, text in files.items():
        normal = os.path.normpath(name)
        if os.path.isabs(normal) or normal == ".." or normal.startswith("../"):
            raise ValueError(f"file name {name!r} leaves the scratch directory")
        parent = os.path.dirname(normal)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(normal, "w", encoding="utf-8") as handle:
            handle.write(text)


def run_snippet(code: str) -> None:
    """Execute ``code`` as ``__main__``; tracebacks show its lines."""
    linecache.cache[SNIPPET_NAME] = (len(code), None, code.splitlines(True), SNIPPET_NAME)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    exec(compile(code, SNIPPET_NAME, "exec"), namespace)


def _collect_tests(module: ModuleType) -> list[tuple[str, Callable[[], object]]]:
    import unittest

    tests = []
    for name, value in vars(module).items():
        if name.startswith("test") and callable(value) and not isinstance(value, type):
            tests.append((name, value))
        elif isinstance(value, type) and issubclass(value, unittest.TestCase):
            for method in unittest.TestLoader().getTestCaseNames(value):
                tests.append((f"{name}.{method}", getattr(value(method), method)))
    return tests


def run_unit_tests(test_code: str) -> None:
    """Import ``test_code`` as a module next to the written files and run its ``test*``
    functions and ``unittest.TestCase`` methods, one line per test, then a summary line
    ``heddle-tests: passed=P failed=F total=T``. Exit code 0 only when every test passed."""
    import importlib

    write_files({f"{TEST_MODULE}.py": test_code})
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(TEST_MODULE)
    except Exception as exc:
        print_model_traceback(exc)
        print("heddle-tests: passed=0 failed=0 total=0 (collection failed)", flush=True)
        raise SystemExit(2) from None
    tests = _collect_tests(module)
    num_passed = 0
    for name, test in tests:
        try:
            test()
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}".strip()[:500]
            print(f"FAILED {name}: {detail}", flush=True)
        else:
            num_passed += 1
            print(f"PASSED {name}", flush=True)
    total = len(tests)
    print(f"heddle-tests: passed={num_passed} failed={total - num_passed} total={total}")
    raise SystemExit(0 if total and num_passed == total else 1)


def _is_bootstrap_frame(filename: str) -> bool:
    return filename == __file__ or filename.startswith("<frozen importlib")


def print_model_traceback(exc: BaseException) -> None:
    """The traceback without the leading frames of this bootstrap and of the import machinery
    (the model sees only its own code)."""
    tb = exc.__traceback__
    while tb is not None and _is_bootstrap_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _exit_code_of(exit_request: SystemExit) -> int:
    code = exit_request.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_call(request: dict[str, Any], isolation: str) -> NoReturn:
    """The runner's whole life; never returns (``os._exit``)."""
    try:
        apply_limits(request["limits"])
        if request.get("uid") is not None:
            drop_privileges(request["uid"])
        os.chdir(request["scratch_dir"])
        os.environ["HOME"] = os.environ["TMPDIR"] = request["scratch_dir"]
        if isolation == "process":
            block_sockets()
            deny_network()  # where it fails here, process_isolation() claimed no block
        write_files(request.get("files", {}))
    except Exception:
        traceback.print_exc()
        os._exit(EXIT_SETUP_FAILED)
    code = 0
    try:
        if request["mode"] == "unit_tests":
            run_unit_tests(request["code"])
        else:
            run_snippet(request["code"])
    except SystemExit as exit_request:
        code = _exit_code_of(exit_request)
    except MemoryError as exc:
        print_model_traceback(exc)
        code = EXIT_MEMORY_LIMIT
    except BaseException as exc:
        print_model_traceback(exc)
        code = 1
    _flush_quietly()
    os._exit(code)


def _flush_quietly() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _redirect_stdin() -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def _prepare_scratch(request: dict[str, Any], isolation: str) -> None:
    """In namespace and bwrap isolation the scratch dir lives in the sandbox's private /tmp
    tmpfs (it vanishes with the sandbox); in process isolation the executor made it and
    removes it."""
    if isolation in ("namespace", "bwrap"):
        request["scratch_dir"] = NAMESPACE_SCRATCH
        os.makedirs(NAMESPACE_SCRATCH, mode=0o700, exist_ok=True)
        if request.get("uid") is not None:
            os.chown(NAMESPACE_SCRATCH, request["uid"], request["uid"])


def _status_record(status: int, rusage: resource.struct_rusage, wall_s: float) -> dict[str, Any]:
    return {
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "cpu_s": rusage.ru_utime + rusage.ru_stime,
        "max_rss_bytes": rusage.ru_maxrss * 1024,
        "wall_s": wall_s,
    }


def main() -> None:
    isolation, status_fd = sys.argv[1], int(sys.argv[2])
    if isolation == "namespace":
        confine_filesystem(int(sys.argv[3]))
    os.write(status_fd, READY_MARKER)
    request = json.loads(sys.stdin.buffer.read())
    _redirect_stdin()
    _prepare_scratch(request, isolation)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(status_fd)
        run_call(request, isolation)
    _, status, rusage = os.wait4(pid, 0)
    record = _status_record(status, rusage, time.monotonic() - started)
    os.write(status_fd, json.dumps(record).encode())
    os._exit(0)


if __name__ == "__main__":
    main()
