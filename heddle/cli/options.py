"""Options several commands take, defined once so each reads the same everywhere (``heddle
up``, ``heddle worker``, ``heddle rollout run`` and ``compare``, ``heddle rollout submit``)."""

from __future__ import annotations

from typing import Annotated

import typer

from heddle.workers.engines import engine_names

EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help=f"Engine of the workers: {', '.join(engine_names())} (`heddle worker --engine "
        "NAME --engine-help` lists its options)",
    ),
]
TokenizerOpt = Annotated[
    str, typer.Option(help="Tokenizer: 'byte' or a local Hugging Face tokenizer folder")
]
HeartbeatOpt = Annotated[float, typer.Option(help="Seconds between a worker's heartbeats")]
HeartbeatTimeoutOpt = Annotated[
    float, typer.Option(help="Seconds without a heartbeat before a worker is declared failed")
]
SeedOpt = Annotated[
    int, typer.Option(help="Seed of the workload (where there is one), random routers and noise")
]
TimeScaleOpt = Annotated[
    float | None,
    typer.Option(
        "--time-scale",
        help="sim engine: model seconds per wall second (default 1: real time); the workers "
        "register it and submissions take it",
    ),
]
