"""`heddle bench tools`: sandbox calls cold (spawn per call) vs warm (pre-warmed pool)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from heddle.bench.tools import bench_cold, bench_warm
from heddle.bus.server import EmbeddedNatsServer
from heddle.cli.apps import bench_app, settings_of
from heddle.cli.tools import IsolationChoice
from heddle.config import Settings
from heddle.errors import UserError
from heddle.workers.tools.limits import SandboxConfig
from heddle.workers.tools.sandbox import SandboxError
from heddle.workers.tools.sandbox_calls import resolve_isolation


async def _run(
    config: SandboxConfig, num_calls: int, concurrency: int, min_warm: int, gap_s: float
) -> dict[str, Any]:
    isolation = await resolve_isolation(config)
    cold = await bench_cold(config, isolation, num_calls, concurrency, gap_s)
    warm, num_cold_starts = await bench_warm(config, num_calls, concurrency, min_warm, gap_s)
    return {
        "isolation": isolation.level,
        "num_calls": num_calls,
        "concurrency": concurrency,
        "min_warm": min_warm,
        "gap_s": gap_s,
        "cold": asdict(cold),
        "warm": asdict(warm),
        "warm_calls_that_spawned": num_cold_starts,
        "sequential_p50_speedup": _ratio(cold.sequential.p50_ms, warm.sequential.p50_ms),
        "concurrent_throughput_ratio": _ratio(
            warm.concurrent.calls_per_s, cold.concurrent.calls_per_s
        ),
    }


async def _run_nats(
    settings: Settings, num_calls: int, concurrency: int, min_warm: int, gap_s: float
) -> dict[str, Any]:
    """Through the configured NATS, or a temporary embedded server when none is configured
    (a benchmark should not write into the data dir's event stream)."""
    from heddle.bench.tools_nats import bench_through_nats
    from heddle.bus import Bus

    with contextlib.ExitStack() as stack:
        if settings.nats_url is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="heddle-bench-")))
            server = stack.enter_context(EmbeddedNatsServer(folder / "nats"))
            settings = replace(settings, nats_url=server.url, data_dir=folder)
        async with Bus(settings) as bus:
            figures = await bench_through_nats(bus, num_calls, concurrency, min_warm, gap_s)
    return asdict(figures)


def _ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 2) if denominator > 0 else 0.0


def _table(report: dict[str, Any]) -> Table:
    table = Table(title=f"sandbox calls ({report['isolation']} isolation)")
    for column in ("mode", "phase", "calls/s", "p50 ms", "p99 ms", "failed"):
        table.add_column(column)
    for mode in ("cold", "warm"):
        figures = report[mode]
        for phase in ("sequential", "concurrent"):
            stats = figures[phase]
            table.add_row(
                mode,
                phase,
                f"{stats['calls_per_s']:.1f}",
                f"{stats['p50_ms']:.1f}",
                f"{stats['p99_ms']:.1f}",
                str(stats["num_failed"]),
            )
    return table


def _nats_table(figures: dict[str, Any]) -> Table:
    table = Table(title="end to end through NATS: publish ToolCall -> ToolReturned received")
    for column in ("request", "calls/s", "p50 ms", "p99 ms", "failed"):
        table.add_column(column)
    for name, stats in figures.items():
        table.add_row(
            name.replace("_", " "),
            f"{stats['calls_per_s']:.1f}",
            f"{stats['p50_ms']:.1f}",
            f"{stats['p99_ms']:.1f}",
            str(stats["num_failed"]),
        )
    return table


@bench_app.command("tools")
def bench_tools(
    ctx: typer.Context,
    num_calls: Annotated[int, typer.Option(help="Calls per mode and phase")] = 50,
    concurrency: Annotated[int, typer.Option(help="Calls in flight in the concurrent phase")] = 4,
    min_warm: Annotated[int, typer.Option(help="Parked processes of the warm pool")] = 4,
    gap_s: Annotated[
        float, typer.Option(help="Idle seconds between sequential calls (both modes)")
    ] = 0.1,
    isolation: Annotated[IsolationChoice, typer.Option()] = IsolationChoice.auto,
    nats: Annotated[
        bool, typer.Option(help="Also measure end to end through NATS and an executor")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Latency (p50/p99) and calls/s of a trivial snippet, cold vs warm, side by side."""
    if num_calls < 1 or concurrency < 1 or min_warm < 1 or gap_s < 0:
        raise UserError("--num-calls, --concurrency and --min-warm must be >= 1, --gap-s >= 0")
    config = SandboxConfig(isolation=isolation.value)
    try:
        report = asyncio.run(_run(config, num_calls, concurrency, min_warm, gap_s))
        if nats:
            report["nats"] = asyncio.run(
                _run_nats(settings_of(ctx), num_calls, concurrency, min_warm, gap_s)
            )
    except SandboxError as exc:
        raise UserError(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(report))
        return
    console = Console()
    console.print(_table(report))
    if nats:
        console.print(_nats_table(report["nats"]))
    console.print(
        f"sequential p50 speed-up warm/cold: {report['sequential_p50_speedup']}x; "
        f"concurrent throughput warm/cold: {report['concurrent_throughput_ratio']}x; "
        f"warm calls that spawned: {report['warm_calls_that_spawned']}"
    )
