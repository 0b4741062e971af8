"""`heddle worker` (one rollout worker agent) and `heddle workers run N` (several, locally).

Engine options follow the worker's own options as ``--name value`` (or ``--name=value``; a bare
``--flag`` means true), e.g.::

    heddle worker --id w00 --engine sim --model qwen3-32b --tp 2 --time-scale 100
    heddle worker --id w01 --engine sglang --launch --model /models/qwen3-8b --tp 1
    heddle workers run 4 --engine sim --time-scale 50

``heddle worker --engine NAME --engine-help`` lists NAME's options.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from dataclasses import replace
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from heddle.cli.apps import app, settings_of, workers_app
from heddle.cli.options import EngineOpt, HeartbeatOpt, TimeScaleOpt, TokenizerOpt
from heddle.config import Settings
from heddle.errors import UserError
from heddle.observability import Metrics, start_metrics_server
from heddle.observability.server import METRICS_PORT_HELP
from heddle.rollout.processes import child_environment
from heddle.workers.agent.config import WorkerConfig
from heddle.workers.engines import EngineOptionError, create_engine, engine_entry
from heddle.workers.engines.base import Engine
from heddle.workers.engines.options import parse_options

_DEFAULTS = WorkerConfig(worker_id="w00")
_CHILD_MAIN = "from heddle.cli import main; main()"
_EXTRA_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}

TelemetryOpt = Annotated[float, typer.Option(help="Seconds between telemetry reports")]
AckWaitOpt = Annotated[
    float, typer.Option(help="Seconds before an unacknowledged command is redelivered")
]
ToolTimeoutOpt = Annotated[float, typer.Option(help="Wall-clock limit of tool calls (seconds)")]
InFlightOpt = Annotated[int, typer.Option(help="Most commands handled at once")]
EngineHelpOpt = Annotated[bool, typer.Option(help="List the engine's options and exit")]
MetricsPortOpt = Annotated[int, typer.Option(help=METRICS_PORT_HELP)]
NodeOpt = Annotated[
    str,
    typer.Option(
        help="The node its GPUs are in, as registered (a re-shard merges workers of one node; "
        "default: the host name)"
    ),
]


def with_time_scale(options: dict[str, str], time_scale: float | None) -> dict[str, str]:
    """The engine options with ``--time-scale`` (an option of its own, so that ``--help``
    shows it) among them."""
    if time_scale is None:
        return options
    return {**options, "time_scale": repr(time_scale)}


def parse_engine_args(args: list[str]) -> dict[str, str]:
    """``--name value``, ``--name=value`` and bare ``--flag`` (true) into a dict."""
    options: dict[str, str] = {}
    index = 0
    while index < len(args):
        token = args[index]
        if not token.startswith("--") or token == "--":
            raise UserError(f"unexpected argument {token!r}: engine options look like --name value")
        name, has_value, value = token[2:].partition("=")
        if not has_value:
            is_flag = index + 1 >= len(args) or args[index + 1].startswith("--")
            value = "true" if is_flag else args[index + 1]
            index += 0 if is_flag else 1
        options[name] = value
        index += 1
    return options


def _check_engine_options(engine: str, options: dict[str, str]) -> None:
    """Validate the options once, up front, so that a typo is one clear line."""
    try:
        parse_options(engine_entry(engine).options_type(), options, what=f"engine {engine!r}")
    except EngineOptionError as exc:
        raise UserError(str(exc)) from None


def _make_engine(engine: str, options: dict[str, str]) -> Engine:
    try:
        return create_engine(engine, options)
    except ValueError as exc:
        raise UserError(f"engine {engine!r}: {exc}") from None


def _print_engine_help(engine: str) -> None:
    try:
        entry = engine_entry(engine)
        infos = entry.describe()
    except EngineOptionError as exc:
        raise UserError(str(exc)) from None
    table = Table(title=f"{entry.name}: {entry.summary}")
    for column in ("option", "type", "default", "help"):
        table.add_column(column)
    for info in infos:
        table.add_row(f"--{info.name}", info.type_name, info.default, info.help)
    Console().print(table)


def _config(worker_id: str, **fields: object) -> WorkerConfig:
    try:
        return WorkerConfig(worker_id=worker_id, **fields)  # type: ignore[arg-type]
    except ValueError as exc:
        raise UserError(str(exc)) from None


@app.command("worker", context_settings=_EXTRA_ARGS)
def worker_command(
    ctx: typer.Context,
    worker_id: Annotated[str, typer.Option("--id", help="Worker id (a subject token)")] = "w00",
    engine: EngineOpt = "sim",
    tokenizer: TokenizerOpt = _DEFAULTS.tokenizer,
    heartbeat_s: HeartbeatOpt = _DEFAULTS.heartbeat_s,
    telemetry_s: TelemetryOpt = _DEFAULTS.telemetry_s,
    ack_wait_s: AckWaitOpt = _DEFAULTS.command_ack_wait_s,
    tool_timeout_s: ToolTimeoutOpt = _DEFAULTS.tool_timeout_s,
    max_in_flight: InFlightOpt = _DEFAULTS.max_commands_in_flight,
    engine_help: EngineHelpOpt = False,
    metrics_port: MetricsPortOpt = 0,
    time_scale: TimeScaleOpt = None,
    node: NodeOpt = "",
) -> None:
    """Run a rollout worker agent: consume heddle.cmd.worker.<id>.>, drive the engine."""
    if engine_help:
        _print_engine_help(engine)
        return
    options = with_time_scale(parse_engine_args(list(ctx.args)), time_scale)
    _check_engine_options(engine, options)
    config = _config(
        worker_id,
        engine_name=engine,
        tokenizer=tokenizer,
        heartbeat_s=heartbeat_s,
        telemetry_s=telemetry_s,
        command_ack_wait_s=ack_wait_s,
        tool_timeout_s=tool_timeout_s,
        max_commands_in_flight=max_in_flight,
        node=node,
    )
    if _run([config], settings_of(ctx), engine, options, metrics_port):
        raise typer.Exit(1)


@workers_app.command("run", context_settings=_EXTRA_ARGS)
def workers_run_command(
    ctx: typer.Context,
    num_workers: Annotated[int, typer.Argument(help="How many worker agents", min=1)],
    id_prefix: Annotated[str, typer.Option(help="Worker ids are <prefix>00, <prefix>01...")] = (
        "w"
    ),
    first_index: Annotated[
        int, typer.Option(help="Number of the first worker (ids <prefix>NN from here)", min=0)
    ] = 0,
    processes: Annotated[
        bool, typer.Option(help="One child process per worker (default: all in this process)")
    ] = False,
    engine: EngineOpt = "sim",
    tokenizer: TokenizerOpt = _DEFAULTS.tokenizer,
    heartbeat_s: HeartbeatOpt = _DEFAULTS.heartbeat_s,
    telemetry_s: TelemetryOpt = _DEFAULTS.telemetry_s,
    ack_wait_s: AckWaitOpt = _DEFAULTS.command_ack_wait_s,
    tool_timeout_s: ToolTimeoutOpt = _DEFAULTS.tool_timeout_s,
    max_in_flight: InFlightOpt = _DEFAULTS.max_commands_in_flight,
    metrics_port: Annotated[
        int, typer.Option(help=f"{METRICS_PORT_HELP}; with --processes, worker i uses PORT+i")
    ] = 0,
    ray: Annotated[
        str,
        typer.Option(
            help="Run each worker as a Ray actor with its own placement group: 'local' starts "
            "Ray here, 'auto' joins the running cluster, or a Ray address (heddle[ray])"
        ),
    ] = "",
    ray_cpus: Annotated[float, typer.Option(help="CPUs each worker's placement group holds")] = 1.0,
    time_scale: TimeScaleOpt = None,
) -> None:
    """Run N local worker agents with the same engine options: by default all in this process,
    on one event loop and one bus connection (each its own worker id, command consumer and
    engine), so that a laptop holds a large simulated fleet; ``--processes`` for one each."""
    options = with_time_scale(parse_engine_args(list(ctx.args)), time_scale)
    _check_engine_options(engine, options)
    base = _config(
        f"{id_prefix}00",
        engine_name=engine,
        tokenizer=tokenizer,
        heartbeat_s=heartbeat_s,
        telemetry_s=telemetry_s,
        command_ack_wait_s=ack_wait_s,
        tool_timeout_s=tool_timeout_s,
        max_commands_in_flight=max_in_flight,
    )
    try:
        configs = [
            replace(base, worker_id=f"{id_prefix}{i:02d}")
            for i in range(first_index, first_index + num_workers)
        ]
    except ValueError as exc:
        raise UserError(str(exc)) from None
    settings = settings_of(ctx)
    if ray:
        from heddle.workers.ray_workers import serve_on_ray

        if processes or metrics_port:
            raise UserError(
                "--ray runs each worker in its own actor: drop --processes/--metrics-port"
            )
        failed = serve_on_ray(settings, configs, engine, options, address=ray, num_cpus=ray_cpus)
    elif processes:
        worker_args = [*_worker_flags(base), *_engine_flags(options)]
        failed = asyncio.run(_run_children(settings, configs, worker_args, metrics_port))
    else:
        failed = _run(configs, settings, engine, options, metrics_port)
    if failed:
        raise typer.Exit(1)


def _run(
    configs: list[WorkerConfig],
    settings: Settings,
    engine: str,
    options: dict[str, str],
    metrics_port: int = 0,
) -> list[str]:
    from heddle.workers.agent.transport import run_agents

    engines = {config.worker_id: _make_engine(engine, options) for config in configs}
    metrics = Metrics()
    metrics_server = start_metrics_server(metrics_port, metrics.registry)

    async def main() -> list[str]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(stop_signal, stop.set)
        ids = ", ".join(config.worker_id for config in configs)
        Console(stderr=True).print(f"worker {ids} ({engine}): Ctrl-C stops", highlight=False)
        return await run_agents(
            settings, configs, lambda c: engines[c.worker_id], stop, metrics=metrics
        )

    try:
        failed = asyncio.run(main())
    finally:
        if metrics_server is not None:
            metrics_server.close()
    for worker_id in failed:
        Console(stderr=True).print(f"[red]worker {worker_id}: engine failed[/red]")
    return failed


def _worker_flags(config: WorkerConfig) -> list[str]:
    return [
        f"--engine={config.engine_name}",
        f"--tokenizer={config.tokenizer}",
        f"--heartbeat-s={config.heartbeat_s}",
        f"--telemetry-s={config.telemetry_s}",
        f"--ack-wait-s={config.command_ack_wait_s}",
        f"--tool-timeout-s={config.tool_timeout_s}",
        f"--max-in-flight={config.max_commands_in_flight}",
    ]


def _engine_flags(options: dict[str, str]) -> list[str]:
    return [f"--{name}={value}" for name, value in options.items()]


async def _run_children(
    settings: Settings, configs: list[WorkerConfig], worker_args: list[str], metrics_port: int = 0
) -> list[str]:
    """One ``heddle worker`` child per config; the parent holds the bus (and so the embedded
    server, which the children join through the data dir) until they all exit."""
    from heddle.bus import Bus

    async with Bus(settings):
        children = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-c", _CHILD_MAIN, "worker", f"--id={config.worker_id}",
                f"--metrics-port={metrics_port + index if metrics_port else 0}",
                *worker_args, env=child_environment(settings),
            )
            for index, config in enumerate(configs)
        ]  # fmt: skip
        loop = asyncio.get_running_loop()
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(stop_signal, _forward_stop, children)
        codes = await asyncio.gather(*(child.wait() for child in children))
    return [config.worker_id for config, code in zip(configs, codes, strict=True) if code]


def _forward_stop(children: list[asyncio.subprocess.Process]) -> None:
    for child in children:
        if child.returncode is None:
            child.send_signal(signal.SIGTERM)
