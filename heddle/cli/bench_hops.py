"""`heddle bench hops`: the files one trajectory step opens from a tool result to the next
generation, in order, with its hops and returns (``heddle.bench.hops``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from heddle.bench.hops import HopsConfig, HopsResult, bench_hops
from heddle.cli.apps import bench_app


@bench_app.command("hops")
def bench_hops_command(
    steps: Annotated[int, typer.Option(help="Generations of the trajectory", min=2)] = 4,
    tool_s: Annotated[float, typer.Option(help="Model seconds each tool call waits")] = 8.0,
    time_scale: Annotated[float, typer.Option(help="Model seconds per wall second")] = 4.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Trace one trajectory on an in-process deployment (embedded nats-server, control plane,
    one sim worker, one tool executor) and print, in order, the files a tool result's way to the
    next generation opens: from the first call handed its ToolReturned (the executor's publish)
    to the engine's generate. The method and what is left beside the path:
    docs/benchmarks/hops.md."""
    result = bench_hops(HopsConfig(steps=steps, tool_s=tool_s, time_scale=time_scale))
    if as_json:
        print(json.dumps(asdict(result)))
    else:
        _print(result)


def _print(result: HopsResult) -> None:
    for step in result.steps:
        print(
            f"tool result of step {step.step}: {step.num_files} files, {step.num_hops} hops, "
            f"{step.num_returns} returns ({len(step.window_files)} files in the window)"
        )
    last = result.last
    part_of = {file: part for part, files in reversed(last.parts.items()) for file in files}
    for number, file in enumerate(last.files, 1):
        print(f"{number:3d}  {part_of.get(file, ''):13s}  {file}")
