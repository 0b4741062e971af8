"""`heddle sim compare --async-steps S`: the training loop, stop-the-world against partial
rollout (``heddle.experiments.async_steps``), for each system of ``--systems``.

    heddle sim compare --workload coding --model qwen3-32b --gpus 16 --trajectories 1024 \\
        --systems heddle --async-steps 4 --max-staleness 1 --trainer-fraction 0.5 --json

Step ``j`` of a synthetic workload rolls out epoch ``j`` of its prompts (new samples of the
same prompts), its predictors fitted on the previous step's rollout (step 0: on epoch 1, as a
plain ``sim compare``); a trace file is rolled out at every step. The trainer's time is
``--trainer-s`` seconds, or ``--trainer-fraction`` of the first rollout's makespan.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from heddle.errors import UserError
from heddle.experiments.async_steps import LoopReport, TrainerTime, simulate_loop
from heddle.sim import SimConfig
from heddle.traces import TraceTrajectory
from heddle.workloads import generate


def trainer_time(trainer_s: float | None, trainer_fraction: float | None) -> TrainerTime:
    """The flags' trainer time (default: half the first rollout)."""
    if trainer_s is not None and trainer_fraction is not None:
        raise UserError("give at most one of --trainer-s and --trainer-fraction")
    try:
        if trainer_s is not None:
            return TrainerTime(seconds=trainer_s)
        return TrainerTime(fraction=0.5 if trainer_fraction is None else trainer_fraction)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def step_traces(
    workload: str | None,
    first: list[TraceTrajectory],
    history: list[TraceTrajectory],
    num_steps: int,
    seed: int,
) -> tuple[list[list[TraceTrajectory]], list[list[TraceTrajectory]]]:
    """Each step's trace and the history its predictors learn from (the module docstring)."""
    traces = [first]
    for step in range(1, num_steps):
        traces.append(generate(workload, len(first), seed, epoch=step) if workload else first)
    return traces, [history, *traces[:-1]]


def run_loops(
    traces: list[list[TraceTrajectory]],
    histories: list[list[TraceTrajectory]],
    systems: list[str],
    config: SimConfig,
    max_staleness: int,
    trainer: TrainerTime,
) -> dict[str, dict[str, Any]]:
    """Per system: the stop-the-world loop, the partial-rollout loop and the throughput ratio."""
    out: dict[str, dict[str, Any]] = {}
    for name in systems:
        reports: list[LoopReport] = []
        for bound in (0, max_staleness):
            label = f"{name} " + ("stop-the-world" if bound == 0 else f"partial k={bound}")

            def progress(step: int, makespan_s: float, label: str = label) -> None:
                print(f"{label}: step {step} rollout {makespan_s:.0f} s", file=sys.stderr)

            try:
                loop = simulate_loop(
                    traces, histories, name, config, bound, trainer, progress=progress
                )
            except ValueError as exc:
                raise UserError(f"{name}: {exc}") from None
            reports.append(loop)
        stop, partial = reports
        out[name] = {
            "stop_the_world": stop.summary(),
            "partial_rollout": partial.summary(),
            "trajectories_per_hour_ratio": partial.trajectories_per_hour
            / stop.trajectories_per_hour,
        }
    return out


def print_loops(document: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(document))
        return
    table = Table(title=f"{document['source']}: {document['num_steps']} training steps")
    columns = ("system", "loop", "total s", "traj/h", "stale", "loads", "load+drain s")
    for column in (*columns, "KV dropped", "recomputed"):
        table.add_column(column, justify="left" if column in ("system", "loop") else "right")
    for name, loops in document["systems"].items():
        for key in ("stop_the_world", "partial_rollout"):
            row = loops[key]
            table.add_row(
                name,
                "stop" if key == "stop_the_world" else f"partial k={row['max_staleness']}",
                f"{row['total_s']:.0f}",
                f"{row['trajectories_per_hour']:.0f}",
                str(row["max_staleness_seen"]),
                str(row["num_weight_loads"]),
                f"{row['weight_load_s']:.0f}+{row['drain_s']:.0f}",
                str(row["num_invalidated_tokens"]),
                str(row["num_recomputed_tokens"]),
            )
    Console().print(table)
    for name, loops in document["systems"].items():
        ratio = loops["trajectories_per_hour_ratio"]
        Console().print(f"{name}: partial rollout / stop-the-world = {ratio:.2f}x trajectories/h")
