"""`heddle bench fidelity`: the live system against the simulator, and the control plane's
overhead.

    heddle bench fidelity --json                      # both parts
    heddle bench fidelity --part makespan --trajectories 128 --workers 4 --time-scale 50
    heddle bench fidelity --part overhead --overhead-trajectories 6400 --steps-per-s 50

The overhead part is ``heddle bench control``'s driver (``heddle.rollout.bench``) given as a
step rate and framed against the target.

Each run gets its own embedded NATS and SQLite ledger in a temporary data dir (kept with
``--keep``), so a benchmark never writes into a deployment's stream. Logic lives in
``heddle.fidelity``; this module parses flags and prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.table import Table

from heddle.cli.apps import bench_app, settings_of
from heddle.config import Settings
from heddle.control.systems import SYSTEMS
from heddle.errors import UserError
from heddle.fidelity.makespan import FidelityOptions
from heddle.fidelity.overhead import OverheadOptions

Part = Literal["both", "makespan", "overhead"]
_LIVE = FidelityOptions()
_LOAD = OverheadOptions()


@contextlib.contextmanager
def _fresh_data_dir(base: Path, keep: bool) -> Iterator[Path]:
    base.mkdir(parents=True, exist_ok=True)
    if keep:
        kept = Path(tempfile.mkdtemp(prefix="bench-fidelity-", dir=base))
        Console(stderr=True).print(f"data dir kept at {kept}", highlight=False)
        yield kept
        return
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-", dir=base) as temporary:
        yield Path(temporary)


async def _makespan(base: Path, keep: bool, options: Any) -> dict[str, Any]:
    from heddle.fidelity.makespan import measure_fidelity

    with _fresh_data_dir(base, keep) as data_dir:
        result = await measure_fidelity(Settings(data_dir=data_dir), options)
    return result.to_json()


async def _overhead(base: Path, keep: bool, options: Any) -> dict[str, Any]:
    from heddle.fidelity.overhead import measure_overhead

    with _fresh_data_dir(base, keep) as data_dir:
        result = await measure_overhead(Settings(data_dir=data_dir), options)
    return result.to_json()


@bench_app.command("fidelity")
def bench_fidelity(
    ctx: typer.Context,
    part: Annotated[str, typer.Option(help="both, makespan or overhead")] = "both",
    workload: Annotated[str, typer.Option(help="Synthetic workload of both parts")] = (
        _LIVE.workload
    ),
    trajectories: Annotated[
        int, typer.Option(help="Makespan part: trajectories")
    ] = _LIVE.num_trajectories,
    workers: Annotated[
        int, typer.Option(help="Makespan part: sim-engine workers")
    ] = _LIVE.num_workers,
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
    model: Annotated[str, typer.Option(help="Cost-model preset of the workers")] = _LIVE.model,
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
    document: dict[str, Any] = {}
    try:
        if part in ("both", "makespan"):
            document["makespan"] = asyncio.run(_makespan(base, keep, makespan_options))
        if part in ("both", "overhead"):
            document["overhead"] = asyncio.run(_overhead(base, keep, overhead_options))
    except (TimeoutError, ValueError) as exc:
        raise UserError(f"bench fidelity: {exc}") from None
    if as_json:
        typer.echo(json.dumps(document))
    else:
        _print(document)


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
