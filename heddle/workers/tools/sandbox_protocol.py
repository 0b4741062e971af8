"""What the executor and a sandbox child exchange for one call, and the call's result.

The executor sends ``request_payload(request, ...)`` (one JSON object on the child's stdin:
mode, code, files, uid, scratch dir, rlimits) and reads back the child's status record.

The child's waiter writes a ``StatusRecord`` about the code's process (``sandbox_child``);
``classify`` turns it, with whether the wall-clock limit fired and the child's return code,
into (status, exit_code, reason): ``timeout`` beats everything, a missing record is ``killed``
(negative return code) or ``error``, a signal or the memory-limit exit is ``killed`` (the CPU
limit named when the signal was SIGXCPU, or SIGKILL at the CPU limit), the set-up-failed exit
and any other nonzero exit are ``error``, exit 0 is ``ok``.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from heddle.events.base import ToolStatus
from heddle.workers.tools.limits import SandboxLimits
from heddle.workers.tools.sandbox_child import EXIT_MEMORY_LIMIT, EXIT_SETUP_FAILED

SandboxMode = Literal["python", "unit_tests"]


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


status_decoder = msgspec.json.Decoder(StatusRecord)


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


def request_payload(
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
