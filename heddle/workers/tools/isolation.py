"""How a sandbox process is launched and confined, and the uids that calls run under.

Two isolation levels (the guarantees are listed in ``heddle.workers.tools``):
- ``namespace``: the child is wrapped by ``unshare --net --mount --pid --fork``; it needs root (or
  CAP_SYS_ADMIN) and util-linux. Whether it works is decided by a probe that runs a real call
  (``heddle.workers.tools.sandbox.resolve_isolation``), never by assumption.
- ``process``: a plain child process; the fallback where namespaces are not available.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from heddle.workers.tools.sandbox_child import hidden_ancestor, runtime_dirs

CHILD_SCRIPT = Path(__file__).with_name("sandbox_child.py")

IsolationLevel = Literal["namespace", "process"]


@dataclass(frozen=True, slots=True)
class Isolation:
    level: IsolationLevel
    drops_privileges: bool
    """Each call runs under its own unprivileged uid (RLIMIT_NPROC per call, no write access to
    other users' files). Needs root, and in process isolation a runtime other uids can read."""
    unshare_path: str = ""

    def launch_command(self, python: str, status_fd: int, scratch_bytes: int) -> list[str]:
        """The argv of a sandbox process that reports on ``status_fd``."""
        child = [python, "-I", str(CHILD_SCRIPT), self.level, str(status_fd)]
        if self.level == "process":
            return child
        wrapper = [self.unshare_path, "--net", "--mount", "--pid", "--fork", "--kill-child"]
        return [*wrapper, "--propagation", "private", *child, str(scratch_bytes)]


def namespace_candidate() -> Isolation | None:
    """Namespace isolation if its preconditions hold here (root, ``unshare`` on PATH); a probe
    must still confirm it works."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        return None
    return Isolation(level="namespace", drops_privileges=True, unshare_path=unshare)


def process_isolation() -> Isolation:
    """Process isolation; as root it drops privileges only when the interpreter is readable by
    other uids (namespace isolation exposes a hidden one itself, see ``sandbox_child``)."""
    readable = not any(hidden_ancestor(path) for path in runtime_dirs())
    return Isolation(level="process", drops_privileges=os.geteuid() == 0 and readable)


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
