"""`heddle bench control`: the control plane's step event -> command latency under load.

    heddle bench control --trajectories 6400 --workers 16 --step-s 10 --duration-s 60 --json

The control plane runs as a child process (`heddle up`); this process plays the workers (see
``heddle.bench.control``). Prints the control plane's decision latency (event arrival -> outputs
stored) and consumer age (event stored -> decided), p50/p99, and the events/s it decided; the
player's end-to-end p50/p90/p99 of ToolReturned published -> ContinueTrajectory received; the
load average; and every consumer's batch latency from the control plane's status.

The run gets its own embedded NATS and SQLite ledger in a temporary folder of the data dir
(kept with ``--keep``; its logs stay under ``<data dir>/logs``), so it never writes into a
deployment's stream, and its projector never catches up a backlog the bench did not write; an
external ``--nats-url`` or ``--database-url`` is used as given.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from heddle.bench.control import BenchOptions, run_control_bench
from heddle.cli.apps import bench_app, fresh_data_dir, settings_of
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.errors import UserError
from heddle.workloads import generate, workload_names


@bench_app.command("control")
def bench_control(
    ctx: typer.Context,
    trajectories: Annotated[int, typer.Option(help="Live trajectories", min=1)] = 6400,
    workers: Annotated[int, typer.Option(help="Workers played by the bench", min=1)] = 16,
    step_s: Annotated[float, typer.Option(help="Mean wall seconds per trajectory step")] = 10.0,
    duration_s: Annotated[float, typer.Option(help="Wall seconds to run")] = 60.0,
    warmup_s: Annotated[
        float, typer.Option(help="Seconds left out, at least: until every trajectory started")
    ] = 15.0,
    workload: Annotated[str, typer.Option(help=f"{', '.join(workload_names())}")] = "coding",
    policy: Annotated[str, typer.Option(help="System bundle")] = "heddle",
    ledger: Annotated[bool, typer.Option(help="Project the ledger in the control plane")] = True,
    seed: Annotated[int, typer.Option(help="Seed of the workload and the jitter")] = 0,
    keep: Annotated[bool, typer.Option(help="Keep the benchmark's data dir")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Measure how fast the control plane turns step events into commands."""
    if not step_s > 0 or not duration_s > warmup_s >= 0:
        raise UserError("need --step-s > 0 and --duration-s > --warmup-s >= 0")
    if workload not in workload_names():
        raise UserError(f"unknown --workload {workload!r}; choose one of {workload_names()}")
    settings = settings_of(ctx)
    trace = generate(workload, trajectories, seed)
    options = BenchOptions(workers, step_s, duration_s, warmup_s, seed=seed)
    control = ControlPlaneConfig(
        cost_model="qwen3-32b",
        predictor=PredictorConfig("noisy_oracle"),
        worker_timeout_s=max(30.0, 10 * options.heartbeat_s),
        project_ledger=ledger,
        learn_from_ledger=False,
    )
    control = replace(control, host=replace(control.host, durable_prefix=_prefix()))
    log_dir = settings.data_dir / "logs" / f"bench-control-{time.strftime('%Y%m%d-%H%M%S')}"
    with fresh_data_dir(settings.data_dir, "bench-control-", keep=keep) as data_dir:
        run_settings = replace(settings, data_dir=data_dir)
        document = asyncio.run(
            run_control_bench(run_settings, trace, options, control, log_dir, policy)
        )
    document["ledger_in_control_plane"] = ledger
    if as_json:
        typer.echo(json.dumps(document))
        return
    _print(document)


def _prefix() -> str:
    """Durables of their own, so a bench never disturbs a control plane of the data dir."""
    return f"bench{time.strftime('%Y%m%d%H%M%S')}"


def _print(document: dict[str, object]) -> None:
    console = Console()
    plane: dict[str, float] = document["control_plane"]  # type: ignore[assignment]
    loads = ", ".join(f"{load:.2f}" for load in document["load_avg_1m"])  # type: ignore[attr-defined]
    if plane:
        console.print(
            f"control plane: {plane['events_per_s']:.0f} events/s decided; decision (arrival -> "
            f"outputs stored) p50 {plane['decision_ms_p50']:.2f} ms, p99 "
            f"{plane['decision_ms_p99']:.2f} ms; consumer age (stored -> decided) p50 "
            f"{plane['age_ms_p50']:.2f} ms, p99 {plane['age_ms_p99']:.2f} ms; "
            f"{plane['cpu_us_per_event']:.0f} us CPU per event; load {loads}; initial placement "
            f"{document['initial_placement_s'] or float('nan'):.1f} s",
            highlight=False,
        )
    console.print(
        f"{document['num_trajectories']} trajectories on {document['num_workers']} workers, "
        f"a step every {document['step_s']} s: {document['events_per_s']:.0f} events/s; "
        f"step event -> command p50 {document['p50_ms']:.2f} ms, p90 {document['p90_ms']:.2f} "
        f"ms, p99 {document['p99_ms']:.2f} ms, max {document['max_ms']:.1f} ms "
        f"({document['num_samples']} samples)",
        highlight=False,
    )
    table = Table(title="consumers (batch: handler start to outputs stored)")
    columns = ("durable", "decided", "outputs", "batch p50 ms", "batch p99 ms", "age p50 ms")
    for column in columns:
        table.add_column(column, justify="left" if column == "durable" else "right")
    for report in document["consumers"]:  # type: ignore[attr-defined]
        table.add_row(
            report["durable"],
            str(report["num_decided"]),
            str(report["num_outputs"]),
            f"{report['batch_ms_p50']:.2f}",
            f"{report['batch_ms_p99']:.2f}",
            f"{report['age_ms_p50']:.2f}",
        )
    console.print(table)
