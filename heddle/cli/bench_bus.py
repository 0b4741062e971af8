"""`heddle bench bus`: event bus and ledger throughput (publish, raw pull, projection, replay).

    heddle bench bus --events 200000 --json

Publishes step events of realistic size into the data dir's stream (embedded server unless
--nats-url is set), projects them into a fresh SQLite ledger, replays them, and prints events/s
for each with the raw pull rate measured in the same run. ``heddle replay --verify`` afterwards
checks the live ledger against the stream.

With the NATS CLI installed (``heddle.bench.nats_cli``), the same run then measures the bus's
physical limit on the same server: ``nats bench js`` publish and durable pull consume of as many
messages of the step event's size, and reports Heddle's publish (with and without encoding the
events), raw pull, projection and replay rates as ratios of those (``nats_bench_*`` keys;
``--no-nats-bench`` skips it).
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from heddle.bench.bus import BusBenchConfig, run_bus_bench
from heddle.bench.nats_cli import NATSCLI_INSTALL, find_nats_cli, run_nats_bench
from heddle.bus import Bus, BusOptions
from heddle.cli.apps import bench_app, settings_of
from heddle.config import Settings
from heddle.errors import UserError

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
    nats_bench: Annotated[
        bool, typer.Option(help="Also run `nats bench js` on the same server (needs natscli).")
    ] = True,
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
    result = asyncio.run(_run(settings_of(ctx), config, nats_bench))
    if as_json:
        print(json.dumps(result))
    else:
        _print_table(result)


async def _run(settings: Settings, config: BusBenchConfig, nats_bench: bool) -> dict[str, Any]:
    # One connection held throughout keeps an embedded server up for `nats bench` afterwards.
    async with Bus(settings, BusOptions(name="heddle-bench-bus")) as bus:
        result = (await run_bus_bench(settings, config)).as_dict()
        binary = find_nats_cli() if nats_bench else None
        if binary is None:
            result["nats_bench"] = (
                "skipped: --no-nats-bench" if not nats_bench else f"skipped: {NATSCLI_INSTALL}"
            )
            return result
        limit = await run_nats_bench(
            binary, bus.url, result["phases"]["publish"]["events"], result["payload_bytes"],
            fetch_batch=config.batch_size,
        )  # fmt: skip
    pub, consume = limit.pub_msgs_per_s, limit.consume_msgs_per_s
    result.update(
        nats_bench_pub_msgs_s=round(pub, 1),
        nats_bench_consume_msgs_s=round(consume, 1),
        publish_to_nats_bench=_ratio(result["publish_events_per_s"], pub),
        publish_encoded_to_nats_bench=_ratio(result["publish_encoded_events_per_s"], pub),
        raw_pull_to_nats_bench=_ratio(result["raw_pull_events_per_s"], consume),
        projection_to_nats_bench=_ratio(result["projection_events_per_s"], consume),
        replay_to_nats_bench=_ratio(result["replay_events_per_s"], consume),
        replay_lean_to_nats_bench=_ratio(result["replay_lean_events_per_s"], consume),
    )
    return result


def _ratio(heddle: float, nats: float) -> float | None:
    return round(heddle / nats, 3) if nats > 0 else None


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
    if "nats_bench_pub_msgs_s" not in result:
        console.print(f"nats bench: {result['nats_bench']}")
        return
    console.print(
        f"nats bench js (same server, same size): publish {result['nats_bench_pub_msgs_s']:,.0f}"
        f" msgs/s, durable pull consume {result['nats_bench_consume_msgs_s']:,.0f} msgs/s"
    )
    console.print(
        f"heddle / nats bench: publish {result['publish_to_nats_bench']} (encoded beforehand "
        f"{result['publish_encoded_to_nats_bench']}), raw pull "
        f"{result['raw_pull_to_nats_bench']}, projection {result['projection_to_nats_bench']}, "
        f"replay {result['replay_to_nats_bench']} (lean {result['replay_lean_to_nats_bench']})"
    )
