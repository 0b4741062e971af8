"""One sandbox process running one call of untrusted code, seen from the executor.

``SandboxProcess.spawn`` starts a child (``sandbox_child.py``) that parks until ``run`` sends it
a request; ``run`` enforces the wall-clock timeout by killing the whole process group, reads
stdout and stderr through capped buffers, and classifies the outcome from the child's status
record (``sandbox_protocol``). A process serves exactly one call; the pool (``pool.py``) keeps
spawned ones parked; a cold call without a pool, and the isolation probe, are in
``sandbox_calls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
import time

import msgspec

from heddle.workers.tools.isolation import (
    Isolation,
    kill_uid_processes,
)
from heddle.workers.tools.limits import SandboxConfig, SandboxLimits
from heddle.workers.tools.output import CappedBuffer, pump
from heddle.workers.tools.sandbox_child import READY_MARKER
from heddle.workers.tools.sandbox_protocol import (
    SandboxRequest,
    SandboxResult,
    StatusRecord,
    classify,
    request_payload,
    status_decoder,
)

log = logging.getLogger(__name__)

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
            await self._send(request_payload(request, limits, uid, scratch_dir))
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
            return status_decoder.decode(b"".join(chunks))
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


async def _finish_readers(tasks: list[asyncio.Task[None]]) -> None:
    await asyncio.wait(tasks, timeout=_DRAIN_GRACE_S)


def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
