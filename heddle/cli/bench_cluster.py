"""`heddle bench cluster`: a rollout on one server and on a 3-node loopback JetStream cluster
(R3), undisturbed, with a node SIGKILLed mid-rollout, and with the stream leader SIGKILLed
during projection (``heddle.bench.cluster``).

    heddle bench cluster --json
    heddle bench cluster --runs single,leader_kill --trajectories 16
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from heddle.bench.cluster import RUN_KINDS, ClusterBenchConfig, RunKind, run_bench
from heddle.cli.apps import bench_app, settings_of
from heddle.errors import UserError

_DEFAULTS = ClusterBenchConfig()


def parse_runs(text: str) -> tuple[RunKind, ...]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in RUN_KINDS]
    if unknown or not names:
        raise UserError(f"--runs: pick from {', '.join(RUN_KINDS)} (got {text!r})")
    return tuple(kind for kind in RUN_KINDS if kind in names)


@bench_app.command("cluster")
def bench_cluster(
    ctx: typer.Context,
    runs: Annotated[
        str, typer.Option(help=f"Comma-separated runs: {', '.join(RUN_KINDS)}")
    ] = ",".join(RUN_KINDS),
    trajectories: Annotated[
        int, typer.Option(help="Trajectories of the rollout.", min=1)
    ] = _DEFAULTS.num_trajectories,
    workers: Annotated[int, typer.Option(help="Sim workers.", min=1)] = _DEFAULTS.num_workers,
    time_scale: Annotated[
        float, typer.Option(help="Model seconds per wall second.")
    ] = _DEFAULTS.time_scale,
    seed: Annotated[int, typer.Option(help="Seed of the workload and the killed node.")] = 0,
    keep: Annotated[bool, typer.Option(help="Keep the runs' folders (logs, stores).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Runs on fresh servers and data dirs of its own under the data dir."""
    config = dataclasses.replace(
        _DEFAULTS,
        num_trajectories=trajectories,
        num_workers=workers,
        time_scale=time_scale,
        seed=seed,
    )
    kinds = parse_runs(runs)
    base = settings_of(ctx)
    base.data_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="bench-cluster-", dir=base.data_dir))
    try:
        document = asyncio.run(run_bench(config, work_dir, kinds))
    finally:
        if not keep:
            shutil.rmtree(work_dir, ignore_errors=True)
    if as_json:
        print(json.dumps(document))
        return
    console = Console()
    for run in document["runs"]:
        console.print(" ".join(f"{name}={value}" for name, value in run.items()), highlight=False)
    console.print(f"makespan ratio vs single: {document['makespan_ratio_vs_single']}")
