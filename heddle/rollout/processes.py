"""Child processes of a local deployment: the control plane, worker agents, tool executors.

Each child is a ``heddle`` command run with this interpreter (``heddle up``, ``heddle worker``,
``heddle tools serve``), with the parent's settings in its environment (``HEDDLE_DATA_DIR``, and
the NATS and database URLs when configured), so every child joins the same NATS (the data dir's
embedded server when none is configured) and the same ledger. Output goes to one log file per
child under the launcher's log folder; ``log_tail`` quotes it when a child fails.

Children run in their own process group, so a Ctrl-C meant for the parent does not kill them
before the parent has stopped them in order (``stop_all``: SIGTERM, then SIGKILL after a grace
period). On Linux each child also gets SIGTERM when the parent dies (the parent-death signal of
``prctl(2)``), so a launcher killed with SIGKILL or by the OOM killer leaves no control plane,
worker or executor running on without it (a second ``heddle up`` would otherwise meet them).
The kernel sends it when the *thread* that started the child ends: start children from the
thread that lives as long as the launcher (its event loop's).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from heddle.config import Settings, child_variables

_CHILD_MAIN = "from heddle.cli import main; main()"
_LOG_TAIL_BYTES = 3000


@dataclass(slots=True)
class Child:
    """One child process and where its output goes."""

    name: str
    process: asyncio.subprocess.Process
    log_path: Path
    args: list[str] = field(default_factory=list)
    is_reported: bool = False
    """Its unexpected exit was reported already."""

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def is_running(self) -> bool:
        return self.process.returncode is None

    def log_tail(self) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-_LOG_TAIL_BYTES:].decode("utf-8", errors="replace").strip()

    def kill(self) -> None:
        """SIGKILL (crash tests and last resort)."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()


def child_environment(settings: Settings) -> dict[str, str]:
    """The parent's environment with its settings spelled out for ``load_settings``."""
    env = dict(os.environ, HEDDLE_DATA_DIR=str(settings.data_dir))
    for name, value in child_variables(settings).items():
        if value:
            env[name] = value
        else:
            env.pop(name, None)
    return env


class Launcher:
    """Starts and stops ``heddle`` children; logs go to ``log_dir/<name>.log``.

    Workers, tool executors and the projector run ``data_plane_nice`` steps below the control
    plane's CPU priority: on a shared host (a time-scaled run of simulated GPUs), the data plane's
    busy processes must not delay the decisions whose latency the run depends on.
    """

    def __init__(
        self,
        settings: Settings,
        log_dir: Path,
        *,
        data_plane_nice: int = 5,
        credentials: Mapping[str, Path] | None = None,
    ) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.data_plane_nice = data_plane_nice
        self.credentials = dict(credentials or {})
        """NATS credential file per identity (``heddle.deploy.roles.Identity.label``:
        control_plane, worker-<id>, ...); a child started with one listed here connects with
        that file."""
        self.children: dict[str, Child] = {}

    async def start(
        self, name: str, args: Sequence[str], *, nice: int = 0, role: str | None = None
    ) -> Child:
        """Run ``heddle ARGS`` as child ``name`` (replacing a stopped child of that name),
        ``nice`` steps below this process's CPU priority, with the credential of ``role``
        when ``credentials`` has one."""
        old = self.children.get(name)
        if old is not None and old.is_running:
            raise RuntimeError(f"child {name} is already running (pid {old.pid})")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _CHILD_MAIN,
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self._environment(role),
                start_new_session=True,
                preexec_fn=_child_setup(nice, os.getpid()),
            )
        child = Child(name, process, log_path, list(args))
        self.children[name] = child
        return child

    def _environment(self, role: str | None) -> dict[str, str]:
        env = child_environment(self.settings)
        if role is not None and role in self.credentials:
            env["HEDDLE_NATS_CREDS"] = str(self.credentials[role])
        return env

    async def start_control_plane(self, args: Sequence[str] = ()) -> Child:
        return await self.start("control-plane", ["up", *args], role="control_plane")

    async def start_worker(
        self,
        worker_id: str,
        engine: str,
        options: Mapping[str, str],
        heartbeat_s: float,
        *,
        node: str = "",
    ) -> Child:
        """``heddle worker``; ``node``: the node it registers ("": its host's name)."""
        engine_args = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
        args = [
            "worker",
            f"--id={worker_id}",
            f"--engine={engine}",
            f"--heartbeat-s={heartbeat_s}",
            *([f"--node={node}"] if node else []),
            *engine_args,
        ]
        return await self.start(
            f"worker-{worker_id}", args, nice=self.data_plane_nice, role=f"worker-{worker_id}"
        )

    async def start_worker_group(
        self,
        id_prefix: str,
        first_index: int,
        num_workers: int,
        engine: str,
        options: Mapping[str, str],
        heartbeat_s: float,
    ) -> Child:
        """``heddle workers run``: ``num_workers`` agents in one child process (ids
        ``<id_prefix>NN`` from ``first_index``), sharing its event loop and bus connection."""
        engine_args = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
        args = [
            "workers",
            "run",
            str(num_workers),
            f"--id-prefix={id_prefix}",
            f"--first-index={first_index}",
            f"--engine={engine}",
            f"--heartbeat-s={heartbeat_s}",
            *engine_args,
        ]
        if self.credentials:
            raise ValueError(
                "workers sharing a process share its connection, hence one credential: with a "
                "credential per worker, run one worker per process"
            )
        last = first_index + num_workers - 1
        name = f"workers-{id_prefix}{first_index:02d}-{id_prefix}{last:02d}"
        return await self.start(name, args, nice=self.data_plane_nice)

    async def start_tool_executor(
        self, index: int, pool: str = "default", max_in_flight: int = 64
    ) -> Child:
        args = [
            "tools",
            "serve",
            f"--pool={pool}",
            f"--executor-id=tools{index:02d}",
            f"--max-in-flight={max_in_flight}",
        ]
        return await self.start(
            f"tools-{index:02d}", args, nice=self.data_plane_nice, role="tool_executor"
        )

    async def stop(self, name: str, grace_s: float = 10.0) -> int | None:
        """SIGTERM the child, SIGKILL it after ``grace_s``; its exit code."""
        child = self.children.get(name)
        if child is None:
            return None
        if child.is_running:
            child.terminate()
            try:
                await asyncio.wait_for(child.process.wait(), grace_s)
            except TimeoutError:
                child.kill()
                await child.process.wait()
        return child.process.returncode

    async def stop_all(self, names: Sequence[str] | None = None, grace_s: float = 10.0) -> None:
        """Stop the named children (default: all) concurrently."""
        targets = list(self.children) if names is None else list(names)
        await asyncio.gather(*(self.stop(name, grace_s) for name in targets))

    def running(self) -> list[Child]:
        return [child for child in self.children.values() if child.is_running]

    def exited(self) -> list[Child]:
        return [child for child in self.children.values() if not child.is_running]


_PR_SET_PDEATHSIG = 1


def _parent_death_signal() -> Callable[[int, int], int] | None:
    """libc's ``prctl``, looked up before any fork (the child only calls it); None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[[int, int], int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL = _parent_death_signal()


def _child_setup(nice_steps: int, parent_pid: int) -> Callable[[], None]:
    """What a child runs between fork and exec: ``nice_steps`` lower CPU priority, and SIGTERM
    when the parent dies (exit at once if it died before the signal was armed)."""

    def setup() -> None:
        if nice_steps > 0:
            os.nice(nice_steps)
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent_pid:
                os._exit(1)

    return setup


def signal_name(returncode: int | None) -> str:
    """``exit 1`` or ``killed by SIGKILL`` (asyncio reports signals as negative codes)."""
    if returncode is None:
        return "running"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
    return f"exit {returncode}"
