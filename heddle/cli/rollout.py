"""`heddle rollout run | compare`: the main job (`submit`, `cancel`, `delete-payloads`:
``heddle.cli.rollout_submit``).

    heddle rollout run --workload coding --trajectories 128 --workers 4 --engine sim \\
        --time-scale 100 --json
    heddle rollout run --tasks heddle/data/tasks/math.jsonl --env math --engine torch --model tiny
    heddle rollout compare --workload coding --trajectories 128 --gpus 16 --time-scale 100 \\
        --policies heddle,slime,verl
    heddle rollout submit trace.jsonl --policy heddle          # to a running `heddle up`

With nothing configured, `run` starts the embedded NATS (through the data dir), the control
plane (`heddle up`), the worker agents and tool executors as child processes, and stops them at
the end. `--attach` uses a running `heddle up` instead (with HEDDLE_NATS_URL /
HEDDLE_DATABASE_URL for a remote deployment); add `--workers 0` when it runs the workers too.
Engine options follow as `--name value` (`--model`, `--tp`, ...). `--time-scale` (sim engines)
defaults to `auto`: the fastest time scale at which this machine keeps the model clock, printed
(``heddle.rollout.time_scale``). Makespans are in model seconds (wall seconds x time scale).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from heddle.cli.apps import rollout_app, settings_of
from heddle.cli.options import (
    EngineOpt,
    HeartbeatOpt,
    HeartbeatTimeoutOpt,
    SeedOpt,
    TokenizerOpt,
)
from heddle.cli.rollout_flags import (
    EngineFlags,
    EnvOpt,
    GroupOpt,
    JsonOpt,
    QuietOpt,
    RunTimeoutOpt,
    RunTimeScaleOpt,
    SimCostModelOpt,
    SimHardwareOpt,
    SourceFlags,
    TasksOpt,
    ToolsOpt,
    TraceOpt,
    TrajectoriesOpt,
    WorkloadOpt,
    attached_time_scale,
    rollout_plan,
    run_time_scale,
)
from heddle.cli.up import PredictorOpt, SigmaOpt
from heddle.cli.worker import parse_engine_args
from heddle.control.systems import SYSTEMS
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.errors import UserError
from heddle.rollout.compare import (
    CompareOptions,
    check_policies,
    compare_policies,
    plan_pool,
)
from heddle.rollout.driver import (
    RolloutResult,
    RunHooks,
    RunOptions,
    run_rollout,
)
from heddle.rollout.flags import with_history
from heddle.rollout.report import print_comparison, print_summary
from heddle.rollout.sources import Source
from heddle.rollout.submission import TaskOptions
from heddle.rollout.worker_pool import (
    SIM_WORKERS_PER_PROCESS,
    WorkerPool,
    default_workers_per_process,
)

_EXTRA_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}
_TASKS = TaskOptions()
_PREDICTOR = PredictorConfig()


@rollout_app.command("run", context_settings=_EXTRA_ARGS)
def run_command(
    ctx: typer.Context,
    workload: WorkloadOpt = None,
    trace: TraceOpt = None,
    tasks: TasksOpt = None,
    env: EnvOpt = None,
    trajectories: TrajectoriesOpt = 128,
    seed: SeedOpt = 0,
    group_size: GroupOpt = _TASKS.group_size,
    tokenizer: TokenizerOpt = "byte",
    policy: Annotated[str, typer.Option(help=f"System bundle: {', '.join(SYSTEMS)}")] = "heddle",
    workers: Annotated[int, typer.Option(help="Worker agents to start", min=0)] = 4,
    gpus: Annotated[
        int | None, typer.Option(help="Plan the workers' TP degrees for this GPU budget")
    ] = None,
    engine: EngineOpt = "sim",
    workers_per_process: Annotated[
        int | None,
        typer.Option(
            help="Worker agents per child process (default: "
            f"{SIM_WORKERS_PER_PROCESS} for sim engines, 1 otherwise)",
            min=1,
        ),
    ] = None,
    tools: ToolsOpt = 1,
    heartbeat_s: HeartbeatOpt = 1.0,
    attach: Annotated[
        bool, typer.Option(help="Use a running `heddle up` (start no control plane)")
    ] = False,
    cost_model: SimCostModelOpt = None,
    hardware: SimHardwareOpt = None,
    predictor: PredictorOpt = _PREDICTOR.name,
    sigma: SigmaOpt = _PREDICTOR.sigma,
    worker_timeout_s: HeartbeatTimeoutOpt = 6.0,
    timeout_s: RunTimeoutOpt = None,
    timeline: Annotated[Path | None, typer.Option(help="Draw the timeline to this PNG")] = None,
    time_scale: RunTimeScaleOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run one rollout end to end and print its summary."""
    settings = settings_of(ctx)
    options = parse_engine_args(list(ctx.args))
    if policy not in SYSTEMS:
        raise UserError(f"unknown --policy {policy!r}; choose from {', '.join(SYSTEMS)}")
    if gpus is not None and gpus < 1:
        raise UserError(f"--gpus must be >= 1, got {gpus}")
    source = SourceFlags(
        workload, trace, tasks, env, trajectories, seed, group_size, tokenizer
    ).source()
    plan_time_scale: float | None = None
    if attach:
        options, plan_time_scale = attached_time_scale(time_scale, options)
    else:
        options, note = run_time_scale(time_scale, engine, options, source)
        if note:
            typer.echo(note, err=True)
    engine_flags = EngineFlags(
        engine, options, cost_model, hardware, predictor, sigma, seed, worker_timeout_s
    )
    control, engine_time_scale = engine_flags.control_plane()
    if not attach:
        plan_time_scale = engine_time_scale
    control = with_history(control, source, settings.data_dir)
    pool = _pool(workers, engine, options, heartbeat_s)
    if gpus is not None:
        pool = _planned_pool(pool, source, policy, control, gpus)
    per_process = workers_per_process or default_workers_per_process(engine)
    pool = replace(pool, workers_per_process=per_process)
    run_options = RunOptions(
        plan=rollout_plan(policy, source, plan_time_scale),
        pool=pool,
        num_tool_executors=tools,
        control_plane=None if attach else control,
        timeout_s=timeout_s,
        show_progress=not quiet,
        timeline=timeline,
    )
    hooks = _timeline_hooks() if timeline is not None else RunHooks()
    _print_run(asyncio.run(run_rollout(settings, run_options, hooks)), as_json)


def _timeline_hooks() -> RunHooks:
    from heddle.timeline import write_rollout_timeline  # matplotlib: only when asked

    return RunHooks(timeline_writer=write_rollout_timeline)


def _print_run(result: RolloutResult, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(result.to_json()))
        if result.summary.lag.warning:  # also in the document (lag.warning): say it on stderr
            Console(stderr=True).print(f"warning: {result.summary.lag.warning}", highlight=False)
    else:
        print_summary(result, Console())


def _pool(workers: int, engine: str, options: dict[str, str], heartbeat_s: float) -> WorkerPool:
    try:
        return WorkerPool(workers, engine, options, heartbeat_s=heartbeat_s)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _planned_pool(
    pool: WorkerPool, source: Source, policy: str, control: ControlPlaneConfig, gpus: int
) -> WorkerPool:
    """The policy's resource plan for ``gpus`` GPUs (the simulator's planner)."""
    if not source.trace:
        raise UserError("--gpus plans from the trajectories' lengths: give --workload or --trace")
    if gpus < 1:
        raise UserError(f"--gpus must be >= 1, got {gpus}")
    return plan_pool(pool, source, policy, control, gpus)


@rollout_app.command("compare", context_settings=_EXTRA_ARGS)
def compare_command(
    ctx: typer.Context,
    policies: Annotated[str, typer.Option(help="Comma-separated bundles")] = "heddle,slime,verl",
    workload: WorkloadOpt = None,
    trace: TraceOpt = None,
    tasks: TasksOpt = None,
    env: EnvOpt = None,
    trajectories: TrajectoriesOpt = 128,
    seed: SeedOpt = 0,
    group_size: GroupOpt = _TASKS.group_size,
    tokenizer: TokenizerOpt = "byte",
    gpus: Annotated[
        int | None, typer.Option(help="GPU budget each policy plans (default 16 unless --workers)")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Fixed workers for every policy instead of --gpus")
    ] = None,
    engine: EngineOpt = "sim",
    tools: ToolsOpt = 1,
    heartbeat_s: HeartbeatOpt = 1.0,
    cost_model: SimCostModelOpt = None,
    hardware: SimHardwareOpt = None,
    predictor: PredictorOpt = _PREDICTOR.name,
    sigma: SigmaOpt = _PREDICTOR.sigma,
    worker_timeout_s: HeartbeatTimeoutOpt = 6.0,
    simulate: Annotated[
        bool, typer.Option(help="Also simulate each policy on the same trace")
    ] = True,
    timeout_s: RunTimeoutOpt = None,
    time_scale: RunTimeScaleOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run the same trajectories under each policy (fresh control plane and workers each)."""
    settings = settings_of(ctx)
    names = check_policies(policies.split(","))
    options = parse_engine_args(list(ctx.args))
    if gpus is not None and workers is not None:
        raise UserError("give --gpus or --workers, not both")
    source = SourceFlags(
        workload, trace, tasks, env, trajectories, seed, group_size, tokenizer
    ).source()
    options, note = run_time_scale(time_scale, engine, options, source)
    if note:
        typer.echo(note, err=True)
    engine_flags = EngineFlags(
        engine, options, cost_model, hardware, predictor, sigma, seed, worker_timeout_s
    )
    control, engine_time_scale = engine_flags.control_plane()
    pool = _pool(workers or 0, engine, options, heartbeat_s)
    compare_options = CompareOptions(
        policies=names,
        source=source,
        pool=pool,
        control_plane=control,
        num_gpus=None if workers is not None else (gpus or 16),
        num_tool_executors=tools,
        time_scale=engine_time_scale,
        timeout_s=timeout_s,
        simulate=simulate and bool(source.trace),
        show_progress=not quiet,
    )
    result = asyncio.run(compare_policies(settings, compare_options))
    if as_json:
        typer.echo(json.dumps(result.to_json()))
    else:
        print_comparison(result, Console())
