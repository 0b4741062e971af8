"""How a sandbox process is launched and confined, and the uids that calls run under.

Three isolation levels, strongest first (the guarantees are listed in ``heddle.workers.tools``):
- ``namespace``: the child is wrapped by ``unshare --net --mount --pid --fork``; it needs root (or
  CAP_SYS_ADMIN) and util-linux.
- ``bwrap``: the child is wrapped by bubblewrap (``heddle.workers.tools.bwrap``); it needs the
  ``bwrap`` binary and, without root, unprivileged user namespaces: the level for pods.
- ``process``: a plain child process, *unisolated*: model code can reach the filesystem, and the
  network unless a seccomp filter holds it off for the code and its children
  (``heddle.workers.tools.sandbox_seccomp``; ``Isolation.blocks_network`` says which). Used only
  when asked for by name or allowed explicitly (``allow_unisolated``).
Whether a level works is decided by a probe that runs a real call
(``heddle.workers.tools.sandbox.resolve_isolation``), never by assumption.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from heddle.workers.tools.bwrap import bwrap_arguments, bwrap_binary, bwrap_version
from heddle.workers.tools.sandbox_mounts import hidden_ancestor, runtime_dirs

CHILD_SCRIPT = Path(__file__).with_name("sandbox_child.py")
SECCOMP_SCRIPT = CHILD_SCRIPT.with_name("sandbox_seccomp.py")
CHILD_FILES = (CHILD_SCRIPT, CHILD_SCRIPT.with_name("sandbox_mounts.py"), SECCOMP_SCRIPT)
"""The child script and the sibling modules it loads (a copy of the script needs them all)."""

IsolationLevel = Literal["namespace", "bwrap", "process"]
ISOLATED_LEVELS: tuple[IsolationLevel, ...] = ("namespace", "bwrap")
"""The levels ``auto`` tries, in this order, before (if allowed) ``process``."""


@dataclass(frozen=True, slots=True)
class Isolation:
    level: IsolationLevel
    drops_privileges: bool
    """Each call runs under its own unprivileged uid (RLIMIT_NPROC per call, no write access to
    other users' files). Needs root, and in process isolation a runtime other uids can read."""
    unshare_path: str = ""
    bwrap_path: str = ""
    rootless: bool = False
    """bwrap run by an unprivileged user: a new user namespace, every call under that user."""
    runtime_dirs: tuple[str, ...] = ()
    """bwrap: the interpreter's directories, bound back wherever a covering mount hid them."""
    hidden_paths: tuple[str, ...] = ()
    """bwrap: host directories (covered by an empty tmpfs) and files (by /dev/null) the code
    must not see, e.g. the executor's NATS credential."""
    detail: str = ""
    """What runs it, in words (``bubblewrap 0.8.0, rootless``), for events and logs."""
    blocks_network: bool = True
    """No call reaches the network, nor any process it starts (isolated levels: a network
    namespace; ``process``: a seccomp filter, where this machine takes one)."""

    @property
    def is_isolated(self) -> bool:
        return self.level != "process"

    def describe(self) -> str:
        """The level and its detail in one phrase, for logs and ``heddle tools exec``."""
        if not self.is_isolated and self.blocks_network:
            return (
                "process (UNISOLATED: model code can reach the filesystem; the network is "
                "refused to it and its children by a seccomp filter)"
            )
        if not self.is_isolated:
            return "process (UNISOLATED: model code can reach the network and the filesystem)"
        return f"{self.level} ({self.detail})" if self.detail else self.level

    def launch_command(self, python: str, status_fd: int, scratch_bytes: int) -> list[str]:
        """The argv of a sandbox process that reports on ``status_fd``."""
        child = [python, "-I", str(CHILD_SCRIPT), self.level, str(status_fd)]
        if self.level == "process":
            return child
        if self.level == "bwrap":
            wrapper = bwrap_arguments(
                self.bwrap_path,
                rootless=self.rootless,
                runtime_dirs=self.runtime_dirs,
                hidden_paths=self.hidden_paths,
                scratch_bytes=scratch_bytes,
            )
            return [*wrapper, "--", *child]
        wrapper = [self.unshare_path, "--net", "--mount", "--pid", "--fork", "--kill-child"]
        return [*wrapper, "--propagation", "private", *child, str(scratch_bytes)]


def namespace_candidate() -> Isolation | None:
    """Namespace isolation if its preconditions hold here (root, ``unshare`` on PATH); a probe
    must still confirm it works."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        return None
    return Isolation(
        level="namespace", drops_privileges=True, unshare_path=unshare, detail="util-linux unshare"
    )


def bwrap_candidate(hidden_paths: tuple[str, ...] = ()) -> Isolation | None:
    """bwrap isolation if ``bwrap`` is on PATH; a probe must still confirm it works (without
    root it needs unprivileged user namespaces, which a container may forbid)."""
    binary = bwrap_binary()
    if binary is None:
        return None
    rootless = os.geteuid() != 0
    mode = "rootless" if rootless else "as root, per-call uids"
    return Isolation(
        level="bwrap",
        drops_privileges=not rootless,
        bwrap_path=binary,
        rootless=rootless,
        runtime_dirs=tuple(runtime_dirs()),
        hidden_paths=tuple(os.path.abspath(path) for path in hidden_paths),
        detail=f"{bwrap_version(binary)}, {mode}",
    )


def process_isolation() -> Isolation:
    """Process isolation; as root it drops privileges only when the interpreter is readable by
    other uids (namespace isolation exposes a hidden one itself, see ``sandbox_child``). It
    blocks the network only where a real child process could install the seccomp filter."""
    readable = not any(hidden_ancestor(path) for path in runtime_dirs())
    return Isolation(
        level="process",
        drops_privileges=os.geteuid() == 0 and readable,
        blocks_network=can_deny_network(),
    )


@functools.cache
def can_deny_network() -> bool:
    """Whether a child process installs the process level's seccomp filter here (asked once
    per process: a Python started on ``sandbox_seccomp.py`` answers by its exit status)."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", str(SECCOMP_SCRIPT)], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


class UidAllocator:
    """Hands out distinct uids from ``[base, base + count)`` to concurrent calls."""

    def __init__(self, base: int, count: int) -> None:
        if base <= 0 or count <= 0:
            raise ValueError(f"uid range needs base > 0 and count > 0, got {base}, {count}")
        self._free = list(range(base + count - 1, base - 1, -1))

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("no free sandbox uid: raise num_uids above the concurrent calls")
        return self._free.pop()

    def release(self, uid: int) -> None:
        self._free.append(uid)


def kill_uid_processes(uid: int) -> int:
    """SIGKILL every process whose real uid is ``uid`` (leftovers of a call that escaped its
    process group in process isolation); returns how many were signalled."""
    num_killed = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _real_uid(entry) == uid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                num_killed += 1
    return num_killed


def _real_uid(proc_entry: Path) -> int | None:
    try:
        status = (proc_entry / "status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None
