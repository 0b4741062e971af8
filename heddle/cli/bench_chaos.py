"""`heddle bench chaos`: R rollouts while K random processes are SIGKILLed and restarted
(``heddle.bench.chaos``); prints what the trainer received and whether the ledger is consistent.

    heddle bench chaos --rollouts 5 --kills 30 --seed 1 --json
    heddle bench chaos --rollouts 3 --kills 6 --nats-restarts 2 --disk-full --json   # root
    heddle bench chaos --rollouts 5 --kills 30 --zombies 4 --forgeries 200 --json
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

from heddle.bench.chaos import ChaosConfig, run_chaos
from heddle.bench.chaos_trainer import record_completions
from heddle.cli.apps import bench_app, settings_of

_DEFAULTS = ChaosConfig()


@bench_app.command("chaos")
def bench_chaos(
    ctx: typer.Context,
    rollouts: Annotated[int, typer.Option(help="Rollouts, one after another.")] = 5,
    kills: Annotated[int, typer.Option(help="Processes SIGKILLed (and restarted).")] = 30,
    seed: Annotated[int, typer.Option(help="Seed of the kill schedule and the workload.")] = 0,
    trajectories: Annotated[
        int, typer.Option(help="Trajectories per rollout.")
    ] = _DEFAULTS.num_trajectories,
    workers: Annotated[int, typer.Option(help="Sim workers.")] = _DEFAULTS.num_workers,
    time_scale: Annotated[
        float, typer.Option(help="Model seconds per wall second.")
    ] = _DEFAULTS.time_scale,
    nats_restarts: Annotated[
        int, typer.Option(help="Restarts of the nats-server (each down --nats-down-s).")
    ] = 0,
    nats_down_s: Annotated[
        float, typer.Option(help="Wall seconds the nats-server stays down per restart.")
    ] = _DEFAULTS.nats_down_s,
    disk_full: Annotated[
        bool,
        typer.Option(
            help="Fill the JetStream store's disk (a small tmpfs: needs root) mid-run, free it "
            "once the control plane reports the refusal."
        ),
    ] = False,
    zombies: Annotated[
        int,
        typer.Option(help="Workers paused (SIGSTOP) past their failure, then resumed (SIGCONT)."),
    ] = 0,
    zombie_long_pause_s: Annotated[
        float,
        typer.Option(
            help="Every second zombie's pause, past the 2-minute duplicate window (0: none)."
        ),
    ] = _DEFAULTS.zombie_long_pause_s,
    forgeries: Annotated[
        int, typer.Option(help="Forged, early and duplicate events about the running rollouts.")
    ] = 0,
    keep: Annotated[bool, typer.Option(help="Keep the run's folder (logs, stream).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Runs on a fresh data dir of its own (an embedded nats-server and SQLite ledger there)."""
    if rollouts < 1 or kills < 0 or trajectories < 1 or workers < 1:
        raise typer.BadParameter("need rollouts >= 1, kills >= 0, trajectories >= 1, workers >= 1")
    if nats_restarts < 0 or not nats_down_s >= 0:
        raise typer.BadParameter("need --nats-restarts >= 0 and --nats-down-s >= 0")
    if zombies < 0 or forgeries < 0 or zombie_long_pause_s < 0:
        raise typer.BadParameter("need zombies, forgeries and zombie-long-pause-s >= 0")
    config = dataclasses.replace(
        _DEFAULTS,
        num_rollouts=rollouts,
        num_kills=kills,
        seed=seed,
        num_trajectories=trajectories,
        num_workers=workers,
        time_scale=time_scale,
        num_nats_restarts=nats_restarts,
        nats_down_s=nats_down_s,
        disk_full=disk_full,
        num_zombies=zombies,
        zombie_long_pause_s=zombie_long_pause_s,
        num_forgeries=forgeries,
    )
    base = settings_of(ctx)
    base.data_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="chaos-", dir=base.data_dir))
    settings = dataclasses.replace(base, nats_url=None, database_url=None, data_dir=work_dir)
    try:
        report = asyncio.run(run_chaos(settings, config, work_dir))
    finally:
        if not keep:
            shutil.rmtree(work_dir, ignore_errors=True)
    document = report.to_json()
    if as_json:
        print(json.dumps(document))
        return
    console = Console()
    for name, value in document.items():
        console.print(f"{name}: {value}", highlight=False)


@bench_app.command("chaos-trainer", hidden=True)
def bench_chaos_trainer(
    ctx: typer.Context,
    rollout_ids: Annotated[list[str], typer.Argument(help="Rollouts to train on, in order.")],
    record: Annotated[Path, typer.Option(help="File each received trajectory is appended to.")],
) -> None:
    """The chaos bench's trainer process (``heddle.bench.chaos_trainer.record_completions``)."""
    asyncio.run(record_completions(settings_of(ctx), rollout_ids, record))
