"""`heddle replay`: rebuild a ledger from the event stream, verify the live one, export traces.

    heddle replay --verify --json            # the live ledger vs the stream, as of its position
    heddle replay ROLLOUT_ID --export-trace trace.jsonl

The command is thin: ``heddle.replay.open_replay`` rebuilds a fresh ledger (a replay session)
and each option is one analysis of that session; new options (timelines, what-if runs) add a
flag here and a function over ``session.ledger``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
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
def replay_command(
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
    timeline: Annotated[
        Path | None, typer.Option(help="Draw the rollout's per-worker timeline (PNG).")
    ] = None,
    what_if: Annotated[
        str | None,
        typer.Option(
            "--what-if", help="Re-simulate the rollout under these policies (comma-separated)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Rebuild a fresh ledger from the stream; optionally verify, export, draw the timeline and
    re-simulate under other policies. Exits 1 when --verify finds differences or a damaged
    live ledger (a verdict either way, never a traceback)."""
    if rollout_id is not None:
        try:
            check_token(rollout_id, "rollout id")
        except ValueError as exc:
            raise UserError(str(exc)) from None
    analyses = Analyses(timeline, _policies(what_if))
    if rollout_id is None and (analyses.timeline or analyses.what_if):
        raise UserError("--timeline and --what-if need a ROLLOUT_ID")
    result = asyncio.run(_run(settings_of(ctx), rollout_id, verify, export_trace, analyses))
    if as_json:
        print(json.dumps(result))
    else:
        _print(result)
    if verify and not result["consistent"]:
        raise typer.Exit(1)


@dataclass(frozen=True, slots=True)
class Analyses:
    """Analyses of one replayed rollout (``heddle.timeline``, ``heddle.whatif``)."""

    timeline: Path | None = None
    what_if: tuple[str, ...] = ()


def _policies(names: str | None) -> tuple[str, ...]:
    if names is None:
        return ()
    from heddle.control.systems import SYSTEMS

    policies = tuple(dict.fromkeys(n.strip() for n in names.split(",") if n.strip()))
    unknown = [name for name in policies if name not in SYSTEMS]
    if not policies or unknown:
        raise UserError(f"--what-if names policies from {', '.join(SYSTEMS)}, got {names!r}")
    return policies


async def _analyse(session: ReplaySession, analyses: Analyses) -> dict[str, Any]:
    from heddle.timeline import write_rollout_timeline
    from heddle.whatif import what_if

    bus, rollout_id = session.bus, session.rollout_id
    assert bus is not None and rollout_id is not None
    result: dict[str, Any] = {}
    try:
        if analyses.timeline is not None:
            path = await write_rollout_timeline(bus, rollout_id, analyses.timeline)
            result["timeline"] = str(path)
        if analyses.what_if:
            report = await what_if(bus, session.ledger, rollout_id, analyses.what_if)
            result["what_if"] = report.to_json()
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return result


async def _run(
    settings: Settings,
    rollout_id: str | None,
    verify: bool,
    export_trace: Path | None,
    analyses: Analyses,
) -> dict[str, Any]:
    async with open_replay(settings, rollout_id, live=verify) as session:
        result = _replay_summary(session)
        if verify:
            report = await session.verify()
            result.update(asdict(report))
        if export_trace is not None:
            num_exported = await asyncio.to_thread(session.export_trace, export_trace)
            result["trace"] = {"path": str(export_trace), "trajectories": num_exported}
        if analyses.timeline or analyses.what_if:
            result.update(await _analyse(session, analyses))
    return result


def _replay_summary(session: ReplaySession) -> dict[str, Any]:
    stats = session.stats
    return {
        "rollout_id": session.rollout_id,
        "from_snapshot": session.from_snapshot,
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
                f"[green]consistent[/green]: the live ledger matches the stream as of "
                f"#{result['sequence']} ({sum(result['rows_compared'].values())} rows compared; "
                f"{result['unprojected_messages']} later messages not projected yet)"
            )
        elif result.get("error"):
            console.print(f"[red]not consistent[/red]: {result['error']}", highlight=False)
        else:
            console.print(
                f"[red]{result['num_mismatches']} mismatches[/red] as of #{result['sequence']}:"
            )
            for mismatch in result["mismatches"]:
                console.print(f"  {mismatch}", highlight=False)
    if "trace" in result:
        trace = result["trace"]
        console.print(f"wrote {trace['trajectories']} trajectories to {trace['path']}")
    if "timeline" in result:
        console.print(f"timeline: {result['timeline']}", highlight=False)
    if "what_if" in result:
        _print_what_if(result["what_if"], console)


def _print_what_if(report: dict[str, Any], console: Console) -> None:
    recorded = report["recorded"]
    cluster = report["cluster"]
    console.print(
        f"what-if on {cluster['model']}/{cluster['hardware']} TP {cluster['tp_degrees']} "
        f"(predictor {report['predictor']}: {report['predictor_source']}); model seconds:",
        highlight=False,
    )
    makespan = recorded["makespan_s"]
    console.print(
        f"  recorded ({recorded['policy'] or '?'}): "
        + (f"{makespan:.1f}" if makespan is not None else "not finished"),
        highlight=False,
    )
    ratios = report["makespan_over_simulated_recorded"]
    for policy, simulated in report["simulated"].items():
        ratio = f" ({ratios[policy]:.2f}x the recorded policy's)" if policy in ratios else ""
        line = f"  simulated {policy}: {simulated['makespan_s']:.1f}{ratio}"
        console.print(line, highlight=False)
