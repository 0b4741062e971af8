"""`heddle rollout run | compare | submit | cancel`: the main job.

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
Engine options follow as `--name value` (`--time-scale`, `--model`, `--tp`, ...). Makespans are
in model seconds (wall seconds x time scale).
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
from heddle.cli.up import (
    PredictorOpt,
    SigmaOpt,
    TimeoutOpt,
    check_engine_options,
    control_plane_config,
)
from heddle.cli.worker import parse_engine_args
from heddle.config import Settings
from heddle.consumers import ControlPlaneConfig, PredictorConfig
from heddle.control.systems import SYSTEMS
from heddle.errors import UserError
from heddle.rollout.compare import (
    CompareOptions,
    check_policies,
    compare_policies,
    plan_pool,
)
from heddle.rollout.deployment import (
    SIM_WORKERS_PER_PROCESS,
    WorkerPool,
    default_workers_per_process,
)
from heddle.rollout.driver import (
    RunHooks,
    RunOptions,
    require_control_plane,
    run_rollout,
)
from heddle.rollout.flags import engine_defaults, source_from_flags, with_history
from heddle.rollout.report import print_comparison, print_summary
from heddle.rollout.sources import Source
from heddle.rollout.submission import RolloutPlan, TaskOptions, submit
from heddle.workers.environments import environment_names
from heddle.workloads import workload_names

_EXTRA_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}
_TASKS = TaskOptions()
_PREDICTOR = PredictorConfig()

WorkloadOpt = Annotated[
    str | None, typer.Option(help=f"Synthetic workload: {', '.join(workload_names())}")
]
TraceOpt = Annotated[Path | None, typer.Option(help="JSONL trace file (replayed by `trace`)")]
TasksOpt = Annotated[Path | None, typer.Option(help="JSONL task file of a real environment")]
_ENVIRONMENTS = ", ".join(environment_names())
EnvOpt = Annotated[
    str | None, typer.Option("--env", help=f"Environment of --tasks: {_ENVIRONMENTS}")
]
TrajectoriesOpt = Annotated[int, typer.Option(help="Trajectories of --workload")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the workload, routers and noise")]
GroupOpt = Annotated[int, typer.Option(help="Samples per task (--tasks)")]
EngineOpt = Annotated[str, typer.Option(help="Engine of the workers (sim, torch, sglang)")]
ToolsOpt = Annotated[int, typer.Option(help="Tool executors to start", min=0)]
HeartbeatOpt = Annotated[float, typer.Option(help="Workers' heartbeat period (seconds)")]
RunTimeoutOpt = Annotated[
    float | None, typer.Option(help="Give up (and cancel) after this many wall seconds")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object")]
QuietOpt = Annotated[bool, typer.Option(help="No live progress on stderr")]
TokenizerOpt = Annotated[str, typer.Option(help="Tokenizer of the prompts: byte or a local path")]
CostModelOpt = Annotated[
    str | None,
    typer.Option(help="Cost-model preset of the workers' model (default: the sim engine's)"),
]
HardwareOpt = Annotated[
    str | None, typer.Option(help="GPU kind of the cost model (default: the sim engine's)")
]


def _control(
    engine: str,
    options: dict[str, str],
    cost_model: str | None,
    hardware: str | None,
    predictor: str,
    sigma: float,
    seed: int,
    worker_timeout_s: float,
) -> tuple[ControlPlaneConfig, float]:
    check_engine_options(engine, options)
    model, sim_hardware, time_scale = engine_defaults(engine, options)
    config = control_plane_config(
        cost_model=cost_model or model or "qwen3-8b",
        hardware=hardware or sim_hardware or "h200",
        predictor=predictor,
        sigma=sigma,
        seed=seed,
        worker_timeout_s=worker_timeout_s,
        transfer_kv=True,
    )
    return config, time_scale


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
    cost_model: CostModelOpt = None,
    hardware: HardwareOpt = None,
    predictor: PredictorOpt = _PREDICTOR.name,
    sigma: SigmaOpt = _PREDICTOR.sigma,
    worker_timeout_s: TimeoutOpt = 6.0,
    timeout_s: RunTimeoutOpt = None,
    timeline: Annotated[Path | None, typer.Option(help="Draw the timeline to this PNG")] = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run one rollout end to end and print its summary."""
    settings = settings_of(ctx)
    options = parse_engine_args(list(ctx.args))
    if policy not in SYSTEMS:
        raise UserError(f"unknown --policy {policy!r}; choose from {', '.join(SYSTEMS)}")
    control, time_scale = _control(
        engine, options, cost_model, hardware, predictor, sigma, seed, worker_timeout_s
    )
    if gpus is not None and gpus < 1:
        raise UserError(f"--gpus must be >= 1, got {gpus}")
    source = source_from_flags(
        workload, trace, tasks, env, trajectories, seed, group_size, tokenizer
    )
    control = with_history(control, source, settings.data_dir)
    pool = _pool(workers, engine, options, heartbeat_s)
    if gpus is not None:
        pool = _planned_pool(pool, source, policy, control, gpus)
    per_process = workers_per_process or default_workers_per_process(engine)
    pool = replace(pool, workers_per_process=per_process)
    run_options = RunOptions(
        plan=_plan(policy, source, time_scale),
        pool=pool,
        num_tool_executors=tools,
        control_plane=None if attach else control,
        timeout_s=timeout_s,
        show_progress=not quiet,
        timeline=timeline,
    )
    hooks = RunHooks()
    if timeline is not None:
        from heddle.timeline import write_rollout_timeline  # matplotlib: only when asked

        hooks = RunHooks(timeline_writer=write_rollout_timeline)
    result = asyncio.run(run_rollout(settings, run_options, hooks))
    if as_json:
        typer.echo(json.dumps(result.to_json()))
        if result.summary.lag.warning:  # also in the document (lag.warning): say it on stderr
            Console(stderr=True).print(f"warning: {result.summary.lag.warning}", highlight=False)
    else:
        print_summary(result, Console())


def _plan(policy: str, source: Source, time_scale: float) -> RolloutPlan:
    try:
        return RolloutPlan(policy, source.specs, source.label, time_scale)
    except ValueError as exc:
        raise UserError(str(exc)) from None


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
    cost_model: CostModelOpt = None,
    hardware: HardwareOpt = None,
    predictor: PredictorOpt = _PREDICTOR.name,
    sigma: SigmaOpt = _PREDICTOR.sigma,
    worker_timeout_s: TimeoutOpt = 6.0,
    simulate: Annotated[
        bool, typer.Option(help="Also simulate each policy on the same trace")
    ] = True,
    timeout_s: RunTimeoutOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run the same trajectories under each policy (fresh control plane and workers each)."""
    settings = settings_of(ctx)
    names = check_policies(policies.split(","))
    options = parse_engine_args(list(ctx.args))
    control, time_scale = _control(
        engine, options, cost_model, hardware, predictor, sigma, seed, worker_timeout_s
    )
    if gpus is not None and workers is not None:
        raise UserError("give --gpus or --workers, not both")
    source = source_from_flags(
        workload, trace, tasks, env, trajectories, seed, group_size, tokenizer
    )
    pool = _pool(workers or 0, engine, options, heartbeat_s)
    compare_options = CompareOptions(
        policies=names,
        source=source,
        pool=pool,
        control_plane=control,
        num_gpus=None if workers is not None else (gpus or 16),
        num_tool_executors=tools,
        time_scale=time_scale,
        timeout_s=timeout_s,
        simulate=simulate and bool(source.trace),
        show_progress=not quiet,
    )
    result = asyncio.run(compare_policies(settings, compare_options))
    if as_json:
        typer.echo(json.dumps(result.to_json()))
    else:
        print_comparison(result, Console())


@rollout_app.command("submit")
def submit_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Trace file, or task file with --env")],
    policy: Annotated[str, typer.Option(help=f"System bundle: {', '.join(SYSTEMS)}")] = "heddle",
    env: EnvOpt = None,
    group_size: GroupOpt = _TASKS.group_size,
    seed: SeedOpt = 0,
    tokenizer: TokenizerOpt = "byte",
    time_scale: Annotated[
        float, typer.Option(help="Time scale of the workers (sim engines), for the summary")
    ] = 1.0,
    as_json: JsonOpt = False,
) -> None:
    """Submit a trace or task file to a running control plane (`heddle up`); print its id."""
    if policy not in SYSTEMS:
        raise UserError(f"unknown --policy {policy!r}; choose from {', '.join(SYSTEMS)}")
    trace = file if env is None else None
    tasks = file if env is not None else None
    source = source_from_flags(None, trace, tasks, env, 0, seed, group_size, tokenizer)
    plan = _plan(policy, source, time_scale)
    rollout_id = asyncio.run(_submit(settings_of(ctx), plan))
    if as_json:
        typer.echo(json.dumps({"rollout_id": rollout_id, "num_trajectories": len(plan.specs)}))
    else:
        typer.echo(rollout_id)


async def _submit(settings: Settings, plan: RolloutPlan) -> str:
    from heddle.bus import Bus

    async with Bus(settings) as bus:
        await require_control_plane(bus)
        return await submit(bus, plan)


@rollout_app.command("cancel")
def cancel_command(
    ctx: typer.Context,
    rollout_id: Annotated[str, typer.Argument(help="The rollout to cancel")],
    reason: Annotated[str, typer.Option(help="Recorded with the cancellation")] = "cancelled",
) -> None:
    """Cancel a rollout: its trajectories are aborted and get no further commands."""
    from heddle.bus import Bus
    from heddle.ids import check_token
    from heddle.rollout.driver import cancel_rollout

    try:
        check_token(rollout_id, "rollout id")
    except ValueError as exc:
        raise UserError(str(exc)) from None

    async def cancel() -> None:
        async with Bus(settings_of(ctx)) as bus:
            await cancel_rollout(bus, rollout_id, reason)

    asyncio.run(cancel())
    typer.echo(f"cancelled {rollout_id}")


@rollout_app.command("delete-payloads")
def delete_payloads_command(
    ctx: typer.Context,
    rollout_id: Annotated[str, typer.Argument(help="The finished rollout")],
) -> None:
    """Delete a rollout's offloaded arrays (bucket heddle-payloads) before their 7-day expiry.
    Its events stay: the ledger and replay need only the counts they carry; the trainer can no
    longer read the token values of those fields."""
    from heddle.bus import Bus
    from heddle.ids import check_token

    try:
        check_token(rollout_id, "rollout id")
    except ValueError as exc:
        raise UserError(str(exc)) from None

    async def delete() -> int:
        async with Bus(settings_of(ctx)) as bus:
            return await bus.delete_payloads(rollout_id)

    typer.echo(f"deleted {asyncio.run(delete())} payload objects of {rollout_id}")
