"""`heddle bench bus`: event bus and ledger throughput (publish, raw pull, projection, replay).

    heddle bench bus --events 200000 --json

Publishes step events of realistic size into the data dir's stream (embedded server unless
--nats-url is set), projects them into a fresh SQLite ledger, replays them, and prints events/s
for each with the raw pull rate measured in the same run. ``heddle replay --verify`` afterwards
checks the live ledger against the stream.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from heddle.cli.apps import bench_app, settings_of
from heddle.errors import UserError
from heddle.ledger.bench import BusBenchConfig, run_bus_bench

_DEFAULTS = BusBenchConfig()


@bench_app.command("bus")
def bench_bus(
    ctx: typer.Context,
    events: Annotated[int, typer.Option(help="Step events to publish.")] = _DEFAULTS.num_events,
    trajectories: Annotated[
        int, typer.Option(help="Trajectories the events are spread over.")
    ] = _DEFAULTS.num_trajectories,
    tokens: Annotated[
        int, typer.Option(help="Token ids (and logprobs) per step event.")
    ] = _DEFAULTS.num_tokens,
    batch_size: Annotated[
        int, typer.Option(help="Messages per fetch and events per ledger transaction.")
    ] = _DEFAULTS.batch_size,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Measure publish, raw pull, ledger projection and replay rates."""
    try:
        config = BusBenchConfig(
            num_events=events,
            num_trajectories=trajectories,
            num_tokens=tokens,
            batch_size=batch_size,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    result = asyncio.run(run_bus_bench(settings_of(ctx), config)).as_dict()
    if as_json:
        print(json.dumps(result))
    else:
        _print_table(result)


def _print_table(result: dict[str, Any]) -> None:
    table = Table(title=f"heddle bench bus ({result['payload_bytes']} bytes per step event)")
    for column in ("phase", "events", "events/s", "client CPU µs/event", "server CPU µs/event"):
        table.add_column(column, justify="right" if column != "phase" else "left")
    for name, phase in result["phases"].items():
        server = phase["server_cpu_us_per_event"]
        table.add_row(
            name,
            str(phase["events"]),
            f"{phase['events_per_s']:,.0f}",
            f"{phase['client_cpu_us_per_event']:.1f}",
            "-" if server is None else f"{server:.1f}",
        )
    console = Console()
    console.print(table)
    console.print(f"projection / raw pull: {result['projection_to_raw']}")
