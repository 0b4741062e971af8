"""``ServerSupervisor``: run a server command as a child, wait until it is ready, restart it with
backoff when it dies or stops answering, and stop it cleanly.

It knows nothing of SGLang: the command and the readiness probe are given (``launcher.py`` builds
both for ``python -m sglang.launch_server``). The child runs in its own process group, because
SGLang forks scheduler and detokenizer processes that must die with it; stopping sends SIGTERM to
the group, then SIGKILL after ``stop_timeout_s``.

Lifecycle: ``STOPPED -> STARTING -> READY``; a crash (exit, or ``max_probe_failures`` failed
liveness probes in a row) goes ``READY -> RESTARTING -> READY`` after a backoff; more than
``max_restarts`` consecutive failed restarts end in ``FAILED``. A server that stays ready for
``stable_s`` has its failure count reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

Probe = Callable[[], Awaitable[bool]]
"""Answers True when the server is ready; must not raise."""


class SupervisorError(RuntimeError):
    """The server would not start, or kept crashing past its restart budget."""


class SupervisorState(enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SupervisorConfig:
    command: tuple[str, ...]
    """The server command line (argv)."""
    ready_timeout_s: float = 1800.0
    """Longest wait for readiness after a (re)start: loading a large model takes minutes."""
    poll_interval_s: float = 0.5
    """Readiness polling period while starting."""
    liveness_interval_s: float = 5.0
    """Probe period while ready."""
    max_probe_failures: int = 3
    """Failed liveness probes in a row that count as a crash (the child is killed, restarted)."""
    max_restarts: int = 5
    """Consecutive failed (re)starts tolerated before giving up (FAILED)."""
    restart_backoff_initial_s: float = 1.0
    restart_backoff_max_s: float = 60.0
    stable_s: float = 300.0
    """Ready this long resets the failure count."""
    stop_timeout_s: float = 30.0
    """Grace between SIGTERM and SIGKILL."""
    log_path: Path | None = None
    """Where the child's stdout and stderr go (appended); None inherits ours."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables added to our environment for the child."""

    def backoff_s(self, num_failures: int) -> float:
        return min(self.restart_backoff_max_s, self.restart_backoff_initial_s * 2.0**num_failures)


class ServerSupervisor:
    """Owns one server child process; ``async with`` starts and stops it."""

    def __init__(self, config: SupervisorConfig, probe: Probe) -> None:
        if not config.command:
            raise ValueError("the supervised command is empty")
        self.config = config
        self._probe = probe
        self._process: asyncio.subprocess.Process | None = None
        self._log_file: IO[bytes] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self.state = SupervisorState.STOPPED
        self.num_restarts = 0
        self.after_restart: Callable[[], Awaitable[None]] | None = None
        """Run once a restarted server is ready, before it counts as ready again (the engine
        re-applies state the launch command does not carry: weights loaded since)."""
        """Restarts so far (all of them; the failure budget counts consecutive ones)."""
        self.failure: str | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    async def __aenter__(self) -> ServerSupervisor:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start the child and wait until it is ready; ``SupervisorError`` if it never is."""
        if self.state is not SupervisorState.STOPPED:
            raise SupervisorError(f"supervisor already {self.state.value}")
        self.state = SupervisorState.STARTING
        try:
            await self._launch_until_ready()
        except BaseException:
            await self._kill()
            self.state = SupervisorState.STOPPED
            raise
        self._mark_ready()
        self._watch_task = asyncio.get_running_loop().create_task(self._watch())

    async def wait_ready(self, timeout_s: float | None = None) -> None:
        """Wait until the server is ready again (after a restart); raises once FAILED."""
        async with asyncio.timeout(timeout_s):
            while not self._ready.is_set():
                if self.state in (SupervisorState.FAILED, SupervisorState.STOPPED):
                    raise SupervisorError(self.failure or f"server is {self.state.value}")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.config.poll_interval_s):
                        await self._ready.wait()

    async def stop(self) -> None:
        """Stop watching, then terminate the child's process group (idempotent)."""
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
            self._watch_task = None
        await self._kill()
        self._ready.clear()
        if self.state is not SupervisorState.FAILED:
            self.state = SupervisorState.STOPPED

    async def _watch(self) -> None:
        """Restart the child whenever it crashes, until the failure budget is spent."""
        num_failures = 0
        while True:
            uptime_s = await self._wait_for_crash()
            self._ready.clear()
            if uptime_s >= self.config.stable_s:
                num_failures = 0
            while True:
                if num_failures >= self.config.max_restarts:
                    self.state = SupervisorState.FAILED
                    self.failure = f"server crashed {num_failures + 1} times in a row; giving up"
                    log.error("%s (%s)", self.failure, self._describe())
                    await self._kill()
                    return
                self.state = SupervisorState.RESTARTING
                await asyncio.sleep(self.config.backoff_s(num_failures))
                num_failures += 1
                self.num_restarts += 1
                try:
                    await self._launch_until_ready()
                    if self.after_restart is not None:
                        await self.after_restart()
                except (SupervisorError, OSError, RuntimeError) as exc:
                    log.warning("restart %d failed: %s", self.num_restarts, exc)
                    await self._kill()
                    continue
                self._mark_ready()
                break

    async def _wait_for_crash(self) -> float:
        """Return (the uptime in seconds) once the child exits or stops answering probes."""
        loop = asyncio.get_running_loop()
        ready_at = loop.time()
        num_probe_failures = 0
        process = self._require_process()
        while num_probe_failures < self.config.max_probe_failures:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.liveness_interval_s):
                    await process.wait()
            if process.returncode is not None:
                log.warning("server exited with code %s", process.returncode)
                return loop.time() - ready_at
            num_probe_failures = 0 if await self._probe() else num_probe_failures + 1
        log.warning("server failed %d liveness probes in a row; killing it", num_probe_failures)
        await self._kill()
        return loop.time() - ready_at

    async def _launch_until_ready(self) -> None:
        await self._spawn()
        process = self._require_process()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.ready_timeout_s
        while not await self._probe():
            if process.returncode is not None:
                raise SupervisorError(
                    f"server exited with code {process.returncode} before it was ready "
                    f"({self._describe()})"
                )
            if loop.time() >= deadline:
                raise SupervisorError(
                    f"server not ready after {self.config.ready_timeout_s:.0f} s "
                    f"({self._describe()})"
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.poll_interval_s):
                    await process.wait()

    async def _spawn(self) -> None:
        output: IO[bytes] | None = None
        if self.config.log_path is not None:
            self.config.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = output = self.config.log_path.open("ab")
        self._process = await asyncio.create_subprocess_exec(
            *self.config.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            env={**os.environ, **self.config.env},
            start_new_session=True,
        )
        log.info("started server pid %d: %s", self._process.pid, " ".join(self.config.command))

    async def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)
            _signal_group(process.pid, signal.SIGCONT)  # a stopped (hung) child must see it
            try:
                async with asyncio.timeout(self.config.stop_timeout_s):
                    await process.wait()
            except TimeoutError:
                _signal_group(process.pid, signal.SIGKILL)
                await process.wait()
        if process is not None:
            # Children the server forked may outlive it: end the rest of its group too.
            _signal_group(process.pid, signal.SIGKILL)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _mark_ready(self) -> None:
        self.state = SupervisorState.READY
        self._ready.set()

    def _require_process(self) -> asyncio.subprocess.Process:
        if self._process is None:
            raise SupervisorError("no server process")
        return self._process

    def _describe(self) -> str:
        command = " ".join(self.config.command)
        path = self.config.log_path
        if path is None:
            return f"command: {command}"
        return f"command: {command}; log {path} ends with:\n{_tail(path)}"


def _tail(path: Path, max_lines: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(unreadable)"
    return "\n".join(lines[-max_lines:])


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)
