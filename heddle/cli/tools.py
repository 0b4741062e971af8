"""`heddle tools exec` (one sandboxed call from stdin) and `heddle tools serve` (an executor)."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from heddle.cli.apps import settings_of, tools_app
from heddle.config import Settings
from heddle.errors import UserError
from heddle.workers.tools.call_runner import ToolRunnerConfig
from heddle.workers.tools.isolation import Isolation
from heddle.workers.tools.limits import SandboxConfig, SandboxLimits
from heddle.workers.tools.sandbox import SandboxError, SandboxRequest
from heddle.workers.tools.sandbox_calls import resolve_isolation, run_once
from heddle.workers.tools.sandbox_protocol import SandboxResult
from heddle.workers.tools.search import SAMPLE_CORPUS

if TYPE_CHECKING:
    # The executor imports nats; `heddle tools exec` should not pay for that.
    from heddle.workers.tools.executor import ExecutorConfig

_DEFAULTS = SandboxLimits()


class ExecTool(StrEnum):
    python = "python"


class IsolationChoice(StrEnum):
    auto = "auto"
    namespace = "namespace"
    bwrap = "bwrap"
    process = "process"


IsolationOpt = Annotated[
    IsolationChoice,
    typer.Option(
        help="auto: the first of namespace, bwrap that a probe shows working; "
        "process (unisolated) needs --allow-unisolated"
    ),
]
AllowUnisolatedOpt = Annotated[
    bool,
    typer.Option(
        help="Allow model code to run unisolated (process level: it can reach the network "
        "and the filesystem) when asked for, or when auto finds no isolation"
    ),
]
HideOpt = Annotated[
    list[Path] | None,
    typer.Option(help="Path the sandboxed code must not see at the bwrap level (repeatable)"),
]


def sandbox_config(
    isolation: IsolationChoice,
    allow_unisolated: bool,
    hide: list[Path] | None,
    limits: SandboxLimits,
) -> SandboxConfig:
    """The sandbox config from CLI values; ``UserError`` for process level not allowed, or a
    path to hide that does not exist (a mistyped one would leave the real one visible)."""
    missing = [str(path) for path in hide or () if not path.exists()]
    if missing:
        raise UserError(f"--hide: no such path {', '.join(missing)}")
    if isolation is IsolationChoice.process and not allow_unisolated:
        raise UserError(
            "--isolation process runs model code unisolated (it can reach the network and the "
            "filesystem); add --allow-unisolated to mean it"
        )
    return SandboxConfig(
        isolation=isolation.value,
        limits=limits,
        allow_unisolated=allow_unisolated,
        hidden_paths=tuple(str(path) for path in hide or ()),
    )


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
    isolation: IsolationOpt = IsolationChoice.auto,
    allow_unisolated: AllowUnisolatedOpt = False,
    hide: HideOpt = None,
) -> None:
    """Run one snippet from stdin in the sandbox; print one JSON object (status, exit_code,
    stdout, stderr, duration_s, reason, and the isolation level it ran at: isolation,
    isolation_detail)."""
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
        config = sandbox_config(isolation, allow_unisolated, hide, limits)
        level, result = asyncio.run(_exec(SandboxRequest(code=code, mode=tool.value), config))
    except (ValueError, SandboxError) as exc:
        raise UserError(str(exc)) from None
    report = {
        "status": result.status,
        "exit_code": result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "duration_s": round(result.duration_s, 6),
        "reason": result.reason,
        "isolation": level.level,
        "isolation_detail": level.describe(),
    }
    typer.echo(json.dumps(report))


async def _exec(request: SandboxRequest, config: SandboxConfig) -> tuple[Isolation, SandboxResult]:
    """The isolation the call ran at (resolved as ``auto`` or named), and its result."""
    isolation = await resolve_isolation(config)
    return isolation, await run_once(request, config, isolation)


_EXECUTOR_DEFAULTS = ToolRunnerConfig()


@tools_app.command("serve")
def serve_tools_command(
    ctx: typer.Context,
    pool: Annotated[str, typer.Option(help="Tool pool to serve (heddle.cmd.tool.<pool>)")] = (
        "default"
    ),
    min_warm: Annotated[int, typer.Option(help="Sandbox processes kept parked")] = 2,
    max_procs: Annotated[int, typer.Option(help="Most sandbox processes (parked + running)")] = 8,
    max_in_flight: Annotated[int, typer.Option(help="Most calls handled at once")] = 64,
    max_timeout_s: Annotated[
        float, typer.Option(help="Cap on a call's timeout_s (wall seconds)")
    ] = _EXECUTOR_DEFAULTS.max_timeout_s,
    corpus: Annotated[
        Path, typer.Option(help="Default search corpus (folder of .txt/.md, or .jsonl)")
    ] = SAMPLE_CORPUS,
    isolation: IsolationOpt = IsolationChoice.auto,
    allow_unisolated: AllowUnisolatedOpt = False,
    hide: HideOpt = None,
    executor_id: Annotated[str, typer.Option(help="Name in results (default host-pid)")] = "",
) -> None:
    """Run a tool executor: pull calls of POOL, run them sandboxed, publish the results."""
    from heddle.workers.tools.executor import ExecutorConfig

    try:
        limits = SandboxLimits(timeout_s=max_timeout_s)
        config = ExecutorConfig(
            pool=pool,
            min_warm=min_warm,
            max_procs=max_procs,
            max_in_flight=max_in_flight,
            sandbox=sandbox_config(isolation, allow_unisolated, hide, limits),
            runner=replace(_EXECUTOR_DEFAULTS, max_timeout_s=max_timeout_s),
            default_corpus=corpus,
        )
        if executor_id:
            config = replace(config, executor_id=executor_id)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        asyncio.run(_serve(settings_of(ctx), config))
    except SandboxError as exc:
        raise UserError(str(exc)) from None


async def _serve(settings: Settings, config: ExecutorConfig) -> None:
    from heddle.bus import Bus
    from heddle.workers.tools.executor import ToolExecutor

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    async with Bus(settings) as bus:
        executor = ToolExecutor(bus, config)
        loop = asyncio.get_running_loop()
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(stop_signal, executor.stop)
        Console(stderr=True).print(
            f"tool executor {config.executor_id}: pool {config.pool!r} on {bus.url}, "
            f"{config.min_warm}..{config.max_procs} sandbox processes; Ctrl-C stops",
            highlight=False,
        )
        stats = await executor.run()
    Console(stderr=True).print(
        f"stopped: {stats.num_acked} calls done, {stats.num_dead_lettered} dead-lettered",
        highlight=False,
    )
