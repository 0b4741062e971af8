"""One sandbox process running one call of untrusted code, seen from the executor.

``SandboxProcess.spawn`` starts a child (``sandbox_child.py``) that parks until ``run`` sends it
a request; ``run`` enforces the wall-clock timeout by killing the whole process group, reads
stdout and stderr through capped buffers, and classifies the outcome from the child's status
record. A process serves exactly one call; the pool (``pool.py``) keeps spawned ones parked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from heddle.events.base import ToolStatus
from heddle.workers.tools.isolation import (
    ISOLATED_LEVELS,
    Isolation,
    IsolationLevel,
    bwrap_candidate,
    kill_uid_processes,
    namespace_candidate,
    process_isolation,
)
from heddle.workers.tools.limits import SandboxConfig, SandboxLimits
from heddle.workers.tools.output import CappedBuffer, pump
from heddle.workers.tools.sandbox_child import (
    EXIT_MEMORY_LIMIT,
    EXIT_SETUP_FAILED,
    READY_MARKER,
)

log = logging.getLogger(__name__)

SandboxMode = Literal["python", "unit_tests"]
_DRAIN_GRACE_S = 1.0
"""How long output pipes may stay open after the call's process group died (escaped children
in process isolation); then reading stops."""
_NAMESPACE_EXIT_S = 5.0
"""Longest wait for the kernel to finish killing an ended sandbox's PID namespace."""
_START_TIMEOUT_S = 30.0
"""A child not parked by then is considered failed (start-up takes ~50 ms when idle)."""
_CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_THREAD_ENV = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start, died before the call): not the code's fault."""


class SandboxBroken(SandboxError):
    """A parked process was gone when a call arrived; a fresh one can take the call."""


@dataclass(frozen=True, slots=True)
class SandboxRequest:
    code: str
    """Python source (``python``) or test module source (``unit_tests``)."""
    mode: SandboxMode = "python"
    files: Mapping[str, str] = field(default_factory=dict)
    """Files written into the scratch dir before the code runs (relative names only)."""
    timeout_s: float | None = None
    """The caller's wall-clock limit, capped by the sandbox's own."""

    def __post_init__(self) -> None:
        for name in self.files:
            normal = os.path.normpath(name)
            if not name or os.path.isabs(normal) or normal.split(os.sep)[0] == "..":
                raise ValueError(f"file name {name!r} must be relative and inside the scratch dir")


@dataclass(frozen=True, slots=True)
class SandboxResult:
    status: ToolStatus
    exit_code: int | None
    """Exit status of the code's process; ``-N`` when killed by signal N; None on timeout."""
    stdout: str
    stderr: str
    duration_s: float
    reason: str = ""
    """Why it was not ``ok``, in words (``CPU-time limit``, ``memory limit``, ...)."""
    cpu_s: float = 0.0
    max_rss_bytes: int = 0
    num_dropped_bytes: int = 0
    """Output bytes beyond the cap (stdout and stderr together) that were read and dropped."""


class StatusRecord(msgspec.Struct, frozen=True):
    """What the child's waiter reports about the code's process (see ``sandbox_child``)."""

    exit_code: int | None
    signal: int | None
    cpu_s: float
    max_rss_bytes: int
    wall_s: float


_status_decoder = msgspec.json.Decoder(StatusRecord)


def classify(
    record: StatusRecord | None, *, timed_out: bool, returncode: int | None, limits: SandboxLimits
) -> tuple[ToolStatus, int | None, str]:
    """(status, exit_code, reason) of a finished call."""
    if timed_out:
        return "timeout", None, f"wall-clock limit of {limits.timeout_s:g} s"
    if record is None:
        status: ToolStatus = "killed" if (returncode or 0) < 0 else "error"
        return status, returncode, f"sandbox process ended without a report ({returncode})"
    if record.signal is not None:
        return "killed", -record.signal, _signal_reason(record, limits)
    if record.exit_code == EXIT_MEMORY_LIMIT:
        return "killed", record.exit_code, f"memory limit of {limits.max_memory_bytes} bytes"
    if record.exit_code == EXIT_SETUP_FAILED:
        return "error", record.exit_code, "sandbox setup failed (see stderr)"
    if record.exit_code == 0:
        return "ok", 0, ""
    return "error", record.exit_code, f"exit code {record.exit_code}"


def _signal_reason(record: StatusRecord, limits: SandboxLimits) -> str:
    assert record.signal is not None
    cpu_limit_s = max(1, int(limits.max_cpu_s + 0.999))
    if record.signal == signal.SIGXCPU or (
        record.signal == signal.SIGKILL and record.cpu_s >= cpu_limit_s
    ):
        return f"CPU-time limit of {cpu_limit_s} s"
    return f"killed by {signal.Signals(record.signal).name}"


class SandboxProcess:
    """A spawned child, parked until ``run``; usable for exactly one call."""

    def __init__(
        self, process: asyncio.subprocess.Process, status_fd: int, isolation: Isolation
    ) -> None:
        self._process = process
        self._status_fd = status_fd
        self.isolation = isolation
        self._is_used = False

    @classmethod
    async def spawn(cls, isolation: Isolation, config: SandboxConfig) -> SandboxProcess:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        command = isolation.launch_command(
            config.python_executable, write_fd, config.limits.scratch_bytes
        )
        try:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(write_fd,),
                start_new_session=True,
                env=_CHILD_ENV | _THREAD_ENV,
            )
        except OSError as exc:
            os.close(read_fd)
            raise SandboxError(f"cannot start sandbox process {command[0]}: {exc}") from None
        finally:
            os.close(write_fd)
        sandbox = cls(process, read_fd, isolation)
        try:
            await sandbox._await_ready()
        except BaseException:
            await sandbox.discard()
            raise
        return sandbox

    async def _await_ready(self) -> None:
        """Wait until the child is set up and parked; a child that died on the way (a failed
        mount, a missing interpreter) raises ``SandboxError`` with its stderr."""
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(self._status_fd, _resolve, readable)
        try:
            await asyncio.wait_for(readable, _START_TIMEOUT_S)
            marker = os.read(self._status_fd, len(READY_MARKER))
        except TimeoutError:
            marker = b""
        finally:
            loop.remove_reader(self._status_fd)
        if marker != READY_MARKER:
            await self.discard()
            assert self._process.stderr is not None
            stderr = (await self._process.stderr.read()).decode(errors="replace")
            raise SandboxError(f"sandbox process failed to start: {stderr[-1000:]}")

    @property
    def is_alive(self) -> bool:
        return self._process.returncode is None

    async def run(
        self, request: SandboxRequest, limits: SandboxLimits, uid: int | None = None
    ) -> SandboxResult:
        """Run ``request`` under ``limits`` (as ``uid`` when given); the process is spent after."""
        if self._is_used:
            raise SandboxError("a sandbox process runs exactly one call")
        self._is_used = True
        limits = limits.capped(request.timeout_s)
        scratch_dir = self._make_scratch(uid)
        stdout, stderr = (
            CappedBuffer(limits.max_output_bytes),
            CappedBuffer(limits.max_output_bytes),
        )
        assert self._process.stdout is not None and self._process.stderr is not None
        readers = [pump(self._process.stdout, stdout), pump(self._process.stderr, stderr)]
        tasks = [asyncio.create_task(reader) for reader in readers]
        started = time.monotonic()
        try:
            await self._send(_request_payload(request, limits, uid, scratch_dir))
            timed_out = await self._wait(limits.timeout_s)
            duration_s = time.monotonic() - started
            await self._reap(uid)
            await _finish_readers(tasks)
        finally:
            _cancel(tasks)
            if scratch_dir:
                shutil.rmtree(scratch_dir, ignore_errors=True)
        record = self._read_record()
        status, exit_code, reason = classify(
            record, timed_out=timed_out, returncode=self._process.returncode, limits=limits
        )
        return SandboxResult(
            status=status,
            exit_code=exit_code,
            stdout=stdout.text(),
            stderr=stderr.text(),
            duration_s=duration_s,
            reason=reason,
            cpu_s=record.cpu_s if record else 0.0,
            max_rss_bytes=record.max_rss_bytes if record else 0,
            num_dropped_bytes=stdout.num_dropped_bytes + stderr.num_dropped_bytes,
        )

    async def discard(self) -> None:
        """Kill the process (parked or not) and release its resources."""
        self._is_used = True
        await self._reap(None)

    def _make_scratch(self, uid: int | None) -> str:
        """Process isolation: a fresh dir owned by the call's uid. Namespace and bwrap
        isolation: none here (the child makes one in its private tmpfs)."""
        if self.isolation.is_isolated:
            return ""
        scratch_dir = tempfile.mkdtemp(prefix="heddle-sandbox-")
        if uid is not None:
            os.chown(scratch_dir, uid, uid)
        return scratch_dir

    async def _send(self, payload: bytes) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(payload)
            await stdin.drain()
            stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            await self._reap(None)
            raise SandboxBroken(
                f"sandbox process exited before its call ({self._process.returncode})"
            ) from None

    async def _wait(self, timeout_s: float) -> bool:
        """True when the wall-clock limit expired first."""
        try:
            await asyncio.wait_for(self._process.wait(), timeout_s)
        except TimeoutError:
            return True
        return False

    async def _reap(self, uid: int | None) -> None:
        """Kill whatever is left of the process group (and of the uid), then wait for the
        child. In namespace and bwrap isolation the group's death ends the PID namespace, whose
        processes the kernel then kills: when the child had not exited by itself (a timeout),
        this waits with a per-call uid until they are gone, so the uid is free for the next
        call. (A child that exited by itself did so after its namespace was emptied.)"""
        had_exited = self._process.returncode is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)
        if uid is not None and self.isolation.level == "process":
            kill_uid_processes(uid)
        if self._process.stdin is not None:
            self._process.stdin.close()
        await self._process.wait()
        if uid is not None and self.isolation.is_isolated and not had_exited:
            await _until_gone(uid, time.monotonic() + _NAMESPACE_EXIT_S)

    def _read_record(self) -> StatusRecord | None:
        chunks = []
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._status_fd, 65536):
                chunks.append(chunk)
        os.close(self._status_fd)
        self._status_fd = -1
        if not chunks:
            return None
        try:
            return _status_decoder.decode(b"".join(chunks))
        except msgspec.DecodeError:
            return None

    def __del__(self) -> None:
        if self._status_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._status_fd)


async def _until_gone(uid: int, deadline: float) -> None:
    """Poll (the kernel signals nothing) until no process of ``uid`` is left, or ``deadline``."""
    for _ in range(int(_NAMESPACE_EXIT_S / 0.005)):
        if not kill_uid_processes(uid) or time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.005)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _request_payload(
    request: SandboxRequest, limits: SandboxLimits, uid: int | None, scratch_dir: str
) -> bytes:
    message = {
        "mode": request.mode,
        "code": request.code,
        "files": dict(request.files),
        "uid": uid,
        "scratch_dir": scratch_dir,
        "limits": {
            "max_cpu_s": limits.max_cpu_s,
            "max_memory_bytes": limits.max_memory_bytes,
            "max_processes": limits.max_processes,
            "max_file_bytes": limits.max_file_bytes,
            "max_open_files": limits.max_open_files,
        },
    }
    return json.dumps(message).encode()


async def _finish_readers(tasks: list[asyncio.Task[None]]) -> None:
    await asyncio.wait(tasks, timeout=_DRAIN_GRACE_S)


def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()


async def run_once(
    request: SandboxRequest,
    config: SandboxConfig,
    isolation: Isolation | None = None,
    uid: int | None = None,
) -> SandboxResult:
    """A cold call: spawn a process for ``request`` alone (no pool). Concurrent callers pass
    distinct ``uid``s (a ``UidAllocator``); the default is one uid per calling process."""
    isolation = isolation or await resolve_isolation(config)
    process = await SandboxProcess.spawn(isolation, config)
    if not isolation.drops_privileges:
        uid = None
    elif uid is None:
        uid = config.uid_base + os.getpid() % config.num_uids
    try:
        return await process.run(request, config.limits, uid)
    finally:
        await process.discard()


_PROBE_CODE = (
    "import socket\n"
    "sock = socket.socket()\n"
    "sock.settimeout(5)\n"
    "print('connected' if sock.connect_ex(('127.0.0.1', {port})) == 0 else 'refused')\n"
)
UNISOLATED_HINT = (
    "model code would run unisolated (process level: it can reach the network and the "
    "filesystem); fix one of these, or allow that explicitly (--allow-unisolated)"
)


async def resolve_isolation(config: SandboxConfig) -> Isolation:
    """The isolation to use. A named level is used only when a probe call shows it works
    (``SandboxError`` otherwise); ``process`` is taken as asked. ``auto`` tries namespace, then
    bwrap; when neither works it falls back to process only with ``config.allow_unisolated``
    (and logs a warning), else raises ``SandboxError`` naming why each level failed."""
    if config.isolation == "process":
        return process_isolation()
    levels = ISOLATED_LEVELS if config.isolation == "auto" else (config.isolation,)
    problems = []
    for level in levels:
        candidate, problem = _candidate(level, config)
        if candidate is not None:
            problem = await _probe(candidate, config)
            if not problem:
                return candidate
        problems.append(f"{level}: {problem}")
    if config.isolation != "auto":
        raise SandboxError(f"{config.isolation} isolation is not available here: {problem}")
    if not config.allow_unisolated:
        raise SandboxError(
            f"no sandbox isolation works here ({'; '.join(problems)}); {UNISOLATED_HINT}"
        )
    log.warning("sandbox runs UNISOLATED (process level), as allowed: %s", "; ".join(problems))
    return process_isolation()


def _candidate(level: IsolationLevel, config: SandboxConfig) -> tuple[Isolation | None, str]:
    if level == "namespace":
        return namespace_candidate(), "it needs root and util-linux 'unshare'"
    return bwrap_candidate(config.hidden_paths), "it needs bubblewrap ('bwrap' on PATH)"


async def _probe(candidate: Isolation, config: SandboxConfig) -> str:
    """'' when a real call works in ``candidate`` and cannot reach a port listening on the
    host's loopback, else why not."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        code = _PROBE_CODE.format(port=listener.getsockname()[1])
        try:
            result = await run_once(SandboxRequest(code=code), config, candidate)
        except SandboxError as exc:
            return str(exc)
    if result.status != "ok":
        return f"probe call ended {result.status}: {result.reason} {result.stderr[-300:]}"
    if result.stdout.strip() != "refused":
        return f"probe call reached the network ({result.stdout.strip()})"
    return ""
