"""``heddle archive`` and ``heddle purge``: a training run's data lifecycle from the shell
(``heddle.lifecycle``; docs/trainer.md, "Archiving and purging")::

    heddle archive <rollout_id> --to /archive           # Parquet: events, payloads, completions
    heddle purge <rollout_id>... --archive /archive     # archived and over: out of the stream
    heddle purge --retention --archive /archive --keep-rollouts 5   # archive, then purge, the rest

``purge`` refuses, and removes nothing, when a rollout is running, is not archived, or its
archive misses events the stream has, and when the live ledger differs from its replay.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from heddle.cli.apps import app, settings_of
from heddle.errors import UserError
from heddle.ids import check_token


def _checked(rollout_ids: list[str]) -> list[str]:
    try:
        return [check_token(rollout_id, "rollout id") for rollout_id in rollout_ids]
    except ValueError as exc:
        raise UserError(str(exc)) from None


@app.command("archive")
def archive_command(
    ctx: typer.Context,
    rollout_id: Annotated[str, typer.Argument(help="A finished or cancelled rollout")],
    to: Annotated[Path, typer.Option("--to", help="Archive folder (one sub-folder a rollout)")],
) -> None:
    """Write a rollout's events and completions to DIR/<rollout_id>/ as Parquet."""
    from heddle.bus import Bus
    from heddle.lifecycle.archive import ArchiveError, archive_rollout

    (rollout,) = _checked([rollout_id])

    async def run() -> dict[str, object]:
        async with Bus(settings_of(ctx)) as bus:
            return asdict(await archive_rollout(bus, rollout, to))

    try:
        manifest = asyncio.run(run())
    except ArchiveError as exc:
        raise UserError(str(exc)) from None
    print(json.dumps(manifest))


@app.command("purge")
def purge_command(
    ctx: typer.Context,
    rollout_ids: Annotated[
        list[str] | None, typer.Argument(help="Archived rollouts to remove from the stream")
    ] = None,
    archive: Annotated[
        Path | None, typer.Option(help="Archive folder (default: HEDDLE_ARCHIVE_DIR)")
    ] = None,
    retention: Annotated[
        bool, typer.Option("--retention", help="Archive and purge what the policy lets go")
    ] = False,
    keep_rollouts: Annotated[
        int | None, typer.Option(help="Retention: keep the newest N rollouts")
    ] = None,
    keep_days: Annotated[
        float | None, typer.Option(help="Retention: keep rollouts ended less than D days ago")
    ] = None,
) -> None:
    """Remove archived, finished rollouts from the stream and the object store, behind a
    verified ledger snapshot (heddle replay --verify keeps working)."""
    from heddle.config import load_retention
    from heddle.lifecycle.purge import purge_rollouts
    from heddle.lifecycle.retention import apply_retention

    policy = load_retention(keep_rollouts=keep_rollouts, keep_days=keep_days, archive_dir=archive)
    if policy.archive_dir is None:
        raise UserError("give --archive DIR (or HEDDLE_ARCHIVE_DIR): purge needs the archive")
    settings = settings_of(ctx)
    if retention:
        if rollout_ids:
            raise UserError("give rollout ids or --retention, not both")
        if not policy.is_set:
            raise UserError("--retention needs --keep-rollouts or --keep-days (or their variables)")
        report = asyncio.run(apply_retention(settings, policy))
        print(json.dumps(asdict(report), default=str))
        return
    if not rollout_ids:
        raise UserError("give the rollout ids to purge, or --retention")
    purged = asyncio.run(purge_rollouts(settings, _checked(rollout_ids), policy.archive_dir))
    print(json.dumps(asdict(purged)))
