"""`heddle replay`: rebuild a ledger from the event stream, verify the live one, export traces.

    heddle replay --verify --json            # whole stream vs the live ledger
    heddle replay ROLLOUT_ID --export-trace trace.jsonl

The command is thin: ``heddle.replay.open_replay`` rebuilds a fresh ledger (a replay session)
and each option is one analysis of that session; new options (timelines, what-if runs) add a
flag here and a function over ``session.ledger``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from heddle.cli.apps import app, settings_of
from heddle.config import Settings
from heddle.errors import UserError
from heddle.ids import check_token
from heddle.replay import ReplaySession, open_replay


@app.command("replay")
def replay(
    ctx: typer.Context,
    rollout_id: Annotated[
        str | None, typer.Argument(help="Replay one rollout (default: the whole stream).")
    ] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Compare the live ledger with the replay.")
    ] = False,
    export_trace: Annotated[
        Path | None, typer.Option(help="Write the replayed trajectories as a JSONL trace.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Rebuild a fresh ledger from the stream; optionally verify and export. Exits 1 when
    --verify finds differences."""
    if rollout_id is not None:
        try:
            check_token(rollout_id, "rollout id")
        except ValueError as exc:
            raise UserError(str(exc)) from None
    result = asyncio.run(_run(settings_of(ctx), rollout_id, verify, export_trace))
    if as_json:
        print(json.dumps(result))
    else:
        _print(result)
    if verify and not result["consistent"]:
        raise typer.Exit(1)


async def _run(
    settings: Settings, rollout_id: str | None, verify: bool, export_trace: Path | None
) -> dict[str, Any]:
    async with open_replay(settings, rollout_id, catch_up_live=verify) as session:
        result = _replay_summary(session)
        if verify:
            report = await asyncio.to_thread(session.verify)
            result.update(asdict(report))
        if export_trace is not None:
            num_exported = await asyncio.to_thread(session.export_trace, export_trace)
            result["trace"] = {"path": str(export_trace), "trajectories": num_exported}
    return result


def _replay_summary(session: ReplaySession) -> dict[str, Any]:
    stats = session.stats
    return {
        "rollout_id": session.rollout_id,
        "events": stats.num_events,
        "skipped_messages": stats.num_skipped,
        "last_sequence": stats.last_sequence,
        "replay_s": round(stats.elapsed_s, 3),
        "replay_events_per_s": round(stats.num_events / stats.elapsed_s, 1)
        if stats.elapsed_s > 0
        else None,
    }


def _print(result: dict[str, Any]) -> None:
    console = Console()
    scope = f"rollout {result['rollout_id']}" if result["rollout_id"] else "the whole stream"
    console.print(
        f"replayed {result['events']} events of {scope} in {result['replay_s']} s"
        f" ({result['skipped_messages']} undecodable messages skipped)"
    )
    if "consistent" in result:
        if result["consistent"]:
            console.print(
                f"[green]consistent[/green]: the live ledger matches the stream "
                f"({sum(result['rows_compared'].values())} rows compared)"
            )
        else:
            console.print(f"[red]{result['num_mismatches']} mismatches[/red]:")
            for mismatch in result["mismatches"]:
                console.print(f"  {mismatch}", highlight=False)
    if "trace" in result:
        trace = result["trace"]
        console.print(f"wrote {trace['trajectories']} trajectories to {trace['path']}")
