"""`heddle bench fidelity`: the live system against the simulator, and the control plane's
overhead.

    heddle bench fidelity --json                      # both parts
    heddle bench fidelity --part makespan --trajectories 128 --workers 4 --time-scale 50
    heddle bench fidelity --part overhead --overhead-trajectories 6400 --steps-per-s 50
    heddle bench fidelity --engine torch --model tiny --kv-budget-tokens 1536 \
        --policies heddle,verl --json                   # a real engine under KV pressure

The overhead part is ``heddle bench control``'s driver (``heddle.bench.control``) given as a
step rate and framed against the target.

Each run gets its own embedded NATS and SQLite ledger in a temporary data dir (kept with
``--keep``), so a benchmark never writes into a deployment's stream. Logic lives in
``heddle.bench.fidelity``; this module parses flags and prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.table import Table

from heddle.bench.fidelity.engine_options import EngineFidelityOptions
from heddle.bench.fidelity.makespan import FidelityOptions
from heddle.bench.fidelity.overhead import OverheadOptions
from heddle.cli.apps import bench_app, fresh_data_dir, settings_of
from heddle.config import Settings
from heddle.control.systems import SYSTEMS
from heddle.errors import UserError

Part = Literal["both", "makespan", "overhead"]
_LIVE = FidelityOptions()
_LOAD = OverheadOptions()
_ENGINE = EngineFidelityOptions()


def _fresh_data_dir(base: Path, keep: bool) -> contextlib.AbstractContextManager[Path]:
    return fresh_data_dir(base, "bench-fidelity-", keep=keep)


async def _makespan(base: Path, keep: bool, options: Any) -> dict[str, Any]:
    from heddle.bench.fidelity.makespan import measure_fidelity

    with _fresh_data_dir(base, keep) as data_dir:
        result = await measure_fidelity(Settings(data_dir=data_dir), options)
    return result.to_json()


async def _engine(base: Path, keep: bool, options: EngineFidelityOptions) -> dict[str, Any]:
    from heddle.bench.fidelity.engine import measure_engine_fidelity

    with _fresh_data_dir(base, keep) as data_dir:
        result = await measure_engine_fidelity(data_dir, options)
    return result.to_json()


async def _overhead(base: Path, keep: bool, options: Any) -> dict[str, Any]:
    from heddle.bench.fidelity.overhead import measure_overhead

    with _fresh_data_dir(base, keep) as data_dir:
        result = await measure_overhead(Settings(data_dir=data_dir), options)
    return result.to_json()


@bench_app.command("fidelity")
def bench_fidelity(
    ctx: typer.Context,
    part: Annotated[str, typer.Option(help="both, makespan or overhead")] = "both",
    engine: Annotated[
        str, typer.Option(help="sim (time-scaled sim engines) or torch (the real engine)")
    ] = "sim",
    kv_budget_tokens: Annotated[
        int, typer.Option(help="torch: each worker's KV budget in tokens")
    ] = _ENGINE.kv_budget_tokens,
    policies: Annotated[
        str, typer.Option(help="torch: policies to compare, comma-separated")
    ] = ",".join(_ENGINE.policies),
    workload: Annotated[str, typer.Option(help="Synthetic workload of both parts")] = (
        _LIVE.workload
    ),
    trajectories: Annotated[
        int | None,
        typer.Option(
            help=f"Trajectories ({_LIVE.num_trajectories}; torch {_ENGINE.num_trajectories})"
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(help=f"Workers ({_LIVE.num_workers}; torch {_ENGINE.num_workers})"),
    ] = None,
    tp: Annotated[int, typer.Option(help="Makespan part: TP degree of each worker")] = (
        _LIVE.tp_degree
    ),
    time_scale: Annotated[
        float, typer.Option(help="Makespan part: model seconds per wall second")
    ] = _LIVE.time_scale,
    policy: Annotated[str, typer.Option(help=f"Policy: {', '.join(SYSTEMS)}")] = _LIVE.policy,
    predictor: Annotated[
        str, typer.Option(help="Makespan part: live and simulated")
    ] = _LIVE.predictor,
    model: Annotated[
        str,
        typer.Option(help=f"sim: cost preset ({_LIVE.model}); torch: model ({_ENGINE.model})"),
    ] = "",
    hardware: Annotated[str, typer.Option(help="h100 or h200")] = _LIVE.hardware,
    overhead_trajectories: Annotated[
        int, typer.Option(help="Overhead part: live trajectories")
    ] = _LOAD.num_trajectories,
    overhead_workers: Annotated[
        int, typer.Option(help="Overhead part: synthetic workers")
    ] = _LOAD.num_workers,
    steps_per_s: Annotated[
        float, typer.Option(help="Overhead part: measured steps per wall second")
    ] = _LOAD.steps_per_s,
    duration_s: Annotated[
        float, typer.Option(help="Overhead part: wall seconds of the run (placement included)")
    ] = _LOAD.duration_s,
    warmup_s: Annotated[
        float, typer.Option(help="Overhead part: first seconds left out")
    ] = _LOAD.warmup_s,
    seed: Annotated[int, typer.Option(help="Workload seed")] = _LIVE.seed,
    timeout_s: Annotated[float, typer.Option(help="Makespan part: wall-clock limit")] = (
        _LIVE.timeout_s
    ),
    keep: Annotated[bool, typer.Option(help="Keep the benchmark's data dir")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Live vs simulated makespan of one trace and policy; step event -> command latency."""
    if engine == "torch":
        _torch_fidelity(ctx, model or _ENGINE.model, kv_budget_tokens, policies, trajectories,
                        workers, seed, keep, as_json)  # fmt: skip
        return
    if engine != "sim":
        raise UserError(f"--engine must be sim or torch, got {engine!r}")
    model = model or _LIVE.model
    trajectories = _LIVE.num_trajectories if trajectories is None else trajectories
    workers = _LIVE.num_workers if workers is None else workers
    if part not in ("both", "makespan", "overhead"):
        raise UserError(f"--part must be both, makespan or overhead, got {part!r}")
    if policy not in SYSTEMS:
        raise UserError(f"unknown --policy {policy!r}; choose from {', '.join(SYSTEMS)}")
    try:
        makespan_options = FidelityOptions(
            workload=workload, num_trajectories=trajectories, seed=seed, policy=policy,
            num_workers=workers, tp_degree=tp, model=model, hardware=hardware,
            time_scale=time_scale, predictor=predictor, timeout_s=timeout_s,
        )  # fmt: skip
        overhead_options = OverheadOptions(
            num_trajectories=overhead_trajectories, num_workers=overhead_workers,
            policy=policy, workload=workload, seed=seed, steps_per_s=steps_per_s,
            duration_s=duration_s, warmup_s=warmup_s, model=model, hardware=hardware,
        )  # fmt: skip
    except ValueError as exc:
        raise UserError(str(exc)) from None
    base = settings_of(ctx).data_dir / "bench"
    document = _run_parts(base, keep, part, makespan_options, overhead_options)
    _echo(document, as_json, _print)


def _run_parts(
    base: Path,
    keep: bool,
    part: str,
    makespan_options: FidelityOptions,
    overhead_options: OverheadOptions,
) -> dict[str, Any]:
    """The makespan and/or overhead parts, each on a fresh data dir under ``base``."""
    document: dict[str, Any] = {}
    try:
        if part in ("both", "makespan"):
            document["makespan"] = asyncio.run(_makespan(base, keep, makespan_options))
        if part in ("both", "overhead"):
            document["overhead"] = asyncio.run(_overhead(base, keep, overhead_options))
    except (TimeoutError, ValueError) as exc:
        raise UserError(f"bench fidelity: {exc}") from None
    return document


def _echo(document: dict[str, Any], as_json: bool, show: Callable[[dict[str, Any]], None]) -> None:
    if as_json:
        typer.echo(json.dumps(document))
    else:
        show(document)


def _torch_fidelity(
    ctx: typer.Context,
    model: str,
    kv_budget_tokens: int,
    policies: str,
    trajectories: int | None,
    workers: int | None,
    seed: int,
    keep: bool,
    as_json: bool,
) -> None:
    from heddle.control.systems import SYSTEMS

    names = tuple(name.strip() for name in policies.split(",") if name.strip())
    unknown = [name for name in names if name not in SYSTEMS]
    if unknown:
        raise UserError(f"unknown policy {unknown[0]!r}; choose from {', '.join(SYSTEMS)}")
    try:
        options = EngineFidelityOptions(
            model=model, policies=names, kv_budget_tokens=kv_budget_tokens, seed=seed,
            num_trajectories=_ENGINE.num_trajectories if trajectories is None else trajectories,
            num_workers=_ENGINE.num_workers if workers is None else workers,
        )  # fmt: skip
    except ValueError as exc:
        raise UserError(str(exc)) from None
    base = settings_of(ctx).data_dir / "bench"
    try:
        document = asyncio.run(_engine(base, keep, options))
    except (TimeoutError, ValueError) as exc:
        raise UserError(f"bench fidelity: {exc}") from None
    _echo(document, as_json, _print_engine)


def _print_engine(document: dict[str, Any]) -> None:
    console = Console()
    table = Table(title="torch engine live vs simulated (engine model torch)", title_justify="left")
    columns = ("policy", "live s", "sim s", "live / sim", "recomputed live", "recomputed sim")
    for column in columns:
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, p in document["policies"].items():
        table.add_row(name, f"{p['live_makespan_s']:.2f}", f"{p['sim_makespan_s']:.2f}",
                      f"{p['makespan_ratio']:.3f}", f"{p['live_recomputed_tokens']:,}",
                      f"{p['sim_recomputed_tokens']:,}")  # fmt: skip
    console.print(table)
    console.print(f"targets: {document['meets_targets']}", highlight=False)


def _print(document: dict[str, Any]) -> None:
    console = Console()
    if "makespan" in document:
        m = document["makespan"]
        table = Table(title="live vs simulator (model seconds)", title_justify="left")
        for column in ("run", "makespan s", "tokens/s", "wall s"):
            table.add_column(column, justify="left" if column == "run" else "right")
        live, sim = m["live"], m["simulated"]
        table.add_row("live", f"{live['makespan_s']:.1f}", f"{live['throughput_tok_s']:.0f}",
                      f"{live['wall_s']:.1f}")  # fmt: skip
        table.add_row("simulated", f"{sim['makespan_s']:.1f}", f"{sim['throughput_tok_s']:.0f}",
                      "-")  # fmt: skip
        console.print(table)
        verdict = "meets" if m["meets_target"] else "misses"
        console.print(f"live / simulated = {m['live_over_simulated']:.3f} ({verdict} +-10%)")
    if "overhead" in document:
        o = document["overhead"]
        latency = o["latency_ms"]
        options = o["options"]
        console.print(
            f"step event -> command over {o['num_samples']} steps "
            f"({options['num_trajectories']} live trajectories, {options['num_workers']} "
            f"workers, {o['steps_per_s']:.0f} steps/s): p50 {latency['p50']:.2f} ms, "
            f"p99 {latency['p99']:.2f} ms, max {latency['max']:.1f} ms "
            f"({'meets' if o['meets_target'] else 'misses'} p99 < 5 ms)",
            highlight=False,
        )
