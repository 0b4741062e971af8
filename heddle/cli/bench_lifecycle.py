"""`heddle bench lifecycle`: disk left by a simulated training run with and without retention,
and archive / purge throughput (``heddle.bench.lifecycle``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from heddle.bench.lifecycle import LifecycleConfig, bench_lifecycle
from heddle.cli.apps import bench_app


@bench_app.command("lifecycle")
def bench_lifecycle_command(
    steps: Annotated[int, typer.Option(help="Training steps (one rollout each)", min=1)] = 200,
    tokens: Annotated[int, typer.Option(help="First generation's output tokens", min=2)] = 1500,
    keep: Annotated[int, typer.Option(help="Retention: rollouts kept", min=0)] = 5,
    every: Annotated[int, typer.Option(help="Retention runs every N steps", min=1)] = 20,
    retention: Annotated[bool, typer.Option(help="Apply retention (else keep everything)")] = True,
) -> None:
    """One JSON object: the run's disk figures and archive / purge throughput."""
    config = LifecycleConfig(steps, tokens, keep if retention else None, every)
    print(json.dumps(asdict(bench_lifecycle(config))))
