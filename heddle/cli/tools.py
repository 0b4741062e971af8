"""`heddle tools exec` (one sandboxed call from stdin) and `heddle tools serve` (an executor)."""

from __future__ import annotations

import asyncio
import json
import sys
from enum import StrEnum
from typing import Annotated

import typer

from heddle.cli.apps import tools_app
from heddle.errors import UserError
from heddle.workers.tools.limits import SandboxConfig, SandboxLimits
from heddle.workers.tools.sandbox import SandboxError, SandboxRequest, run_once

_DEFAULTS = SandboxLimits()


class ExecTool(StrEnum):
    python = "python"


class IsolationChoice(StrEnum):
    auto = "auto"
    namespace = "namespace"
    process = "process"


@tools_app.command("exec")
def exec_command(
    tool: Annotated[ExecTool, typer.Argument(help="What to run: python (a snippet on stdin)")],
    timeout_s: Annotated[
        float, typer.Option(help="Wall-clock limit in seconds")
    ] = _DEFAULTS.timeout_s,
    max_cpu_s: Annotated[float, typer.Option(help="CPU-time limit in seconds")] = (
        _DEFAULTS.max_cpu_s
    ),
    max_memory_mib: Annotated[int, typer.Option(help="Address-space limit in MiB")] = (
        _DEFAULTS.max_memory_bytes >> 20
    ),
    max_output_bytes: Annotated[int, typer.Option(help="Bytes kept of stdout and of stderr")] = (
        _DEFAULTS.max_output_bytes
    ),
    isolation: Annotated[
        IsolationChoice, typer.Option(help="auto: namespaces when a probe shows they work")
    ] = IsolationChoice.auto,
) -> None:
    """Run one snippet from stdin in the sandbox; print one JSON object (status, exit_code,
    stdout, stderr, duration_s, reason)."""
    code = sys.stdin.read()
    if not code.strip():
        raise UserError("no code on stdin: pipe a Python snippet, e.g. echo 'print(1)' | ...")
    try:
        limits = SandboxLimits(
            timeout_s=timeout_s,
            max_cpu_s=max_cpu_s,
            max_memory_bytes=max_memory_mib << 20,
            max_output_bytes=max_output_bytes,
        )
        config = SandboxConfig(isolation=isolation.value, limits=limits)
        result = asyncio.run(run_once(SandboxRequest(code=code, mode=tool.value), config))
    except (ValueError, SandboxError) as exc:
        raise UserError(str(exc)) from None
    report = {
        "status": result.status,
        "exit_code": result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "duration_s": round(result.duration_s, 6),
        "reason": result.reason,
    }
    typer.echo(json.dumps(report))
