"""`heddle up`: the long-lived control plane (deciders, worker liveness, ledger projector), with
optional local workers and tool executors as child processes.

    heddle up                                        # control plane only
    heddle up --workers 4 --engine sim --time-scale 100 --tools 2
    heddle --nats-url nats://a:4222,nats://b:4222 --nats-creds control.nk up --replicas 3
    HEDDLE_NATS_URL=nats://nats:4222 HEDDLE_DATABASE_URL=postgresql+psycopg://... heddle up

Engine options follow as ``--name value`` (see ``heddle worker --engine NAME --engine-help``).
SIGTERM or Ctrl-C stops the children, then the control plane after its current batches. A
SIGKILLed control plane restarted on the same NATS resumes where its consumers stopped. With a
retention policy configured (``HEDDLE_RETENTION_KEEP_ROLLOUTS`` / ``_KEEP_DAYS`` and
``HEDDLE_ARCHIVE_DIR``), it archives and purges old rollouts every ``--retention-every-s``
(``heddle.lifecycle.retention``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from heddle.cli.apps import app, settings_of
from heddle.cli.options import HeartbeatTimeoutOpt, SeedOpt, TimeScaleOpt
from heddle.cli.worker import parse_engine_args, with_time_scale
from heddle.config import RetentionPolicy, Settings, load_retention
from heddle.controlplane import (
    LIVE_PREDICTORS,
    ControlPlaneConfig,
    ControlPlaneService,
    HostConfig,
    PredictorConfig,
)
from heddle.errors import UserError
from heddle.policy.cost.model import HARDWARE, MODELS
from heddle.rollout.deployment import LocalDeployment, WorkerPool
from heddle.rollout.trainer_records import TRAINER_RECORDS
from heddle.workers.engines import EngineOptionError, engine_entry
from heddle.workers.engines.options import parse_options
from heddle.workers.environments import validate_task

_EXTRA_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}
_DEFAULTS = ControlPlaneConfig()
_PREDICTOR = PredictorConfig()

CostModelOpt = Annotated[
    str, typer.Option(help=f"Cost-model preset of the workers' model: {', '.join(sorted(MODELS))}")
]
HardwareOpt = Annotated[str, typer.Option(help=f"GPU kind: {', '.join(sorted(HARDWARE))}")]
PredictorOpt = Annotated[
    str, typer.Option(help=f"Remaining-length predictor: {', '.join(LIVE_PREDICTORS)}")
]
SigmaOpt = Annotated[float, typer.Option(help="noisy_oracle: log-error standard deviation")]
TransferOpt = Annotated[
    bool, typer.Option(help="Migrations move the KV cache (else the target re-prefills)")
]
RestartOpt = Annotated[
    float,
    typer.Option(
        help="Seconds a worker's engine takes to relaunch, weights aside (what a re-shard "
        "costs; heddle.control.reshard)",
        min=0,
    ),
]
HistoryOpt = Annotated[
    list[Path] | None,
    typer.Option(help="Trace file of earlier rollouts the predictor learns from (repeatable)"),
]


def control_plane_config(
    *,
    cost_model: str,
    hardware: str,
    predictor: str,
    sigma: float,
    seed: int,
    worker_timeout_s: float,
    transfer_kv: bool,
    ledger: bool = True,
    learn_ledger: bool = True,
    history: list[Path] | None = None,
    durable_prefix: str = "control",
    since: int = 1,
    metrics_port: int = 0,
    engine_restart_s: float = _DEFAULTS.engine_restart_s,
) -> ControlPlaneConfig:
    """The config from CLI values; ``UserError`` for a bad one."""
    try:
        return ControlPlaneConfig(
            cost_model=cost_model,
            hardware=hardware,
            predictor=PredictorConfig(name=predictor, sigma=sigma, seed=seed),
            seed=seed,
            transfer_kv=transfer_kv,
            worker_timeout_s=worker_timeout_s,
            project_ledger=ledger,
            learn_from_ledger=learn_ledger,
            history=tuple(history or ()),
            host=HostConfig(durable_prefix=durable_prefix, since_sequence=max(1, since)),
            metrics_port=metrics_port,
            engine_restart_s=engine_restart_s,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None


def check_engine_options(engine: str, options: dict[str, str]) -> None:
    """Validate engine options once, up front, so that a typo is one clear line."""
    try:
        parse_options(engine_entry(engine).options_type(), options, what=f"engine {engine!r}")
    except EngineOptionError as exc:
        raise UserError(str(exc)) from None


@app.command("up", context_settings=_EXTRA_ARGS)
def up_command(
    ctx: typer.Context,
    workers: Annotated[int, typer.Option(help="Local worker agents to start", min=0)] = 0,
    engine: Annotated[str, typer.Option(help="Engine of the local workers")] = "sim",
    tools: Annotated[int, typer.Option(help="Local tool executors to start", min=0)] = 0,
    heartbeat_s: Annotated[float, typer.Option(help="Local workers' heartbeat period")] = 1.0,
    cost_model: CostModelOpt = _DEFAULTS.cost_model,
    hardware: HardwareOpt = _DEFAULTS.hardware,
    predictor: PredictorOpt = _PREDICTOR.name,
    sigma: SigmaOpt = _PREDICTOR.sigma,
    seed: SeedOpt = _DEFAULTS.seed,
    worker_timeout_s: HeartbeatTimeoutOpt = _DEFAULTS.worker_timeout_s,
    transfer_kv: TransferOpt = True,
    engine_restart_s: RestartOpt = _DEFAULTS.engine_restart_s,
    ledger: Annotated[bool, typer.Option(help="Project events into the ledger here")] = True,
    learn_ledger: Annotated[
        bool, typer.Option(help="Teach the predictor earlier rollouts from the ledger")
    ] = True,
    history: HistoryOpt = None,
    durable_prefix: Annotated[
        str, typer.Option(help="Durable consumers are <prefix>-<slot> (isolated runs)")
    ] = "control",
    since: Annotated[
        int, typer.Option(help="Ignore events before this stream sequence (isolated runs)")
    ] = 1,
    metrics_port: Annotated[
        int, typer.Option(help="Serve Prometheus metrics on this port (0: off)")
    ] = 0,
    replicas: Annotated[
        int | None,
        typer.Option(
            help="Stream replicas (as heddle --nats-replicas; default: 1, or 3 on a cluster)",
            min=1,
            max=5,
        ),
    ] = None,
    time_scale: TimeScaleOpt = None,
    retention_every_s: Annotated[
        float,
        typer.Option(
            help="Apply the retention policy (HEDDLE_RETENTION_KEEP_ROLLOUTS / _KEEP_DAYS, "
            "HEDDLE_ARCHIVE_DIR) this often: archive, then purge (0: never)",
            min=0,
        ),
    ] = 300.0,
) -> None:
    """Run the control plane until Ctrl-C (optionally with local workers and executors)."""
    options = with_time_scale(parse_engine_args(list(ctx.args)), time_scale)
    if workers:
        check_engine_options(engine, options)
    elif options:
        raise UserError(f"engine options ({', '.join(options)}) need --workers N")
    config = control_plane_config(
        cost_model=cost_model,
        hardware=hardware,
        predictor=predictor,
        sigma=sigma,
        seed=seed,
        worker_timeout_s=worker_timeout_s,
        transfer_kv=transfer_kv,
        ledger=ledger,
        learn_ledger=learn_ledger,
        history=history,
        durable_prefix=durable_prefix,
        since=since,
        metrics_port=metrics_port,
        engine_restart_s=engine_restart_s,
    )
    try:
        pool = WorkerPool(workers, engine, options, heartbeat_s=heartbeat_s)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = settings_of(ctx)
    if replicas is not None:
        settings = dataclasses.replace(settings, nats_replicas=replicas)
    retention = load_retention()
    if retention.is_set and retention.archive_dir is None:
        raise UserError("a retention policy archives before it purges: set HEDDLE_ARCHIVE_DIR")
    every_s = retention_every_s if retention.is_set else 0.0
    asyncio.run(_serve(settings, config, pool, tools, (retention, every_s)))


async def _serve(
    settings: Settings,
    config: ControlPlaneConfig,
    pool: WorkerPool,
    tools: int,
    retention: tuple[RetentionPolicy, float] = (RetentionPolicy(), 0.0),
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(stop_signal, stop.set)
    service = ControlPlaneService(
        settings, config, check_task=validate_task, trainer_records=TRAINER_RECORDS
    )
    serving = asyncio.create_task(service.run(stop))
    console = Console(stderr=True)
    ready = asyncio.create_task(service.ready.wait())
    await asyncio.wait({serving, ready}, return_when=asyncio.FIRST_COMPLETED)
    if serving.done():
        ready.cancel()
        serving.result()  # raises what stopped it
        return
    console.print(
        f"control plane ready ({settings.nats_url or 'embedded NATS'}, ledger "
        f"{settings.ledger_url if config.project_ledger else 'not projected here'}); "
        "Ctrl-C stops",
        highlight=False,
    )
    policy, every_s = retention
    if every_s > 0:
        from heddle.lifecycle.retention import retention_loop  # pyarrow: only when used

        serving_retention = asyncio.create_task(retention_loop(settings, policy, every_s, stop))
    if pool.num_workers or tools:
        await _with_children(settings, pool, tools, stop)
    await serving
    if every_s > 0:
        await serving_retention


async def _with_children(
    settings: Settings, pool: WorkerPool, tools: int, stop: asyncio.Event
) -> None:
    from heddle.bus import Bus, BusOptions

    log_dir = settings.data_dir / "logs" / f"up-{time.strftime('%Y%m%d-%H%M%S')}"
    async with Bus(settings, BusOptions(name="heddle-up-children")) as bus:
        deployment = LocalDeployment(bus, log_dir)
        try:
            if pool.num_workers:
                await deployment.start_workers(pool)
            await deployment.start_tools(tools)
            Console(stderr=True).print(
                f"{pool.num_workers} workers, {tools} tool executors up; logs in {log_dir}",
                highlight=False,
            )
            await stop.wait()
        finally:
            await deployment.stop()
            stop.set()
