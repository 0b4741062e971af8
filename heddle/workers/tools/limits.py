"""Typed configuration of the sandbox: per-call resource limits and how processes are isolated."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import Literal

IsolationMode = Literal["auto", "namespace", "bwrap", "process"]
"""``namespace``: PID/network/mount namespaces, read-only root, unprivileged uid (needs root and
``unshare``). ``bwrap``: the same confinement built by bubblewrap, rootless where user
namespaces are allowed (pods). ``process``: rlimits and a Python-level socket block only, i.e.
unisolated. ``auto``: the first of namespace, bwrap that a probe shows working here; process
only with ``allow_unisolated``, else an error."""


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """What one call may use. Every field must be positive."""

    timeout_s: float = 10.0
    """Wall-clock limit; at it the whole process group is killed (status ``timeout``)."""
    max_cpu_s: float = 10.0
    """CPU-time limit (RLIMIT_CPU, rounded up to whole seconds): SIGXCPU, then SIGKILL."""
    max_memory_bytes: int = 1 << 30
    """Address-space limit (RLIMIT_AS) of the code's process."""
    max_processes: int = 64
    """Processes and threads of the call's uid (RLIMIT_NPROC); enforced only when the call runs
    under its own unprivileged uid (namespace isolation, or process isolation as root)."""
    max_file_bytes: int = 64 << 20
    """Largest file the code may write (RLIMIT_FSIZE)."""
    max_open_files: int = 256
    max_output_bytes: int = 64 << 10
    """Bytes of stdout and of stderr kept (each); the rest is read and dropped, never buffered."""
    scratch_bytes: int = 64 << 20
    """Size of each private tmpfs (scratch dir, /tmp, ...) in namespace isolation."""

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"sandbox limit {name} must be > 0, got {value!r}")

    def capped(self, timeout_s: float | None) -> SandboxLimits:
        """These limits with a caller's wall-clock timeout, never above this one's."""
        if timeout_s is None or timeout_s >= self.timeout_s:
            return self
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        return replace(self, timeout_s=timeout_s)


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    isolation: IsolationMode = "auto"
    """How sandbox processes are isolated (see ``IsolationMode``)."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    """Default and maximum limits of a call."""
    python_executable: str = sys.executable
    """Interpreter that runs model code (this environment's, so numpy etc. are importable)."""
    uid_base: int = 4_000_000
    """First of the unprivileged uids given to concurrent calls when running as root; each call
    gets its own uid so RLIMIT_NPROC is per call. The range must be unused on the host."""
    num_uids: int = 4096
    """Size of the uid range (an upper bound on concurrent calls)."""
    allow_unisolated: bool = False
    """Let ``auto`` fall back to ``process`` isolation when no isolated level works (the
    fallback is then logged as a warning); without it that case is a ``SandboxError``."""
    hidden_paths: tuple[str, ...] = ()
    """Host paths the code must not see in ``bwrap`` isolation (e.g. the credentials' folder):
    bwrap runs the code as the executor's own user when rootless, so permissions alone do not
    keep the executor's files from it."""
