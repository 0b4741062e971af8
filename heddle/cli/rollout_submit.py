"""`heddle rollout submit | cancel | delete-payloads`: a rollout on a running control plane
(`heddle up`).

    heddle rollout submit trace.jsonl --policy heddle
    heddle rollout cancel <rollout_id> --reason "bad checkpoint"
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from heddle.cli.apps import rollout_app, settings_of
from heddle.cli.rollout_flags import EnvOpt, GroupOpt, JsonOpt, SeedOpt, TokenizerOpt, rollout_plan
from heddle.config import Settings
from heddle.control.systems import SYSTEMS
from heddle.errors import UserError
from heddle.rollout.control_plane import require_control_plane
from heddle.rollout.flags import source_from_flags
from heddle.rollout.submission import RolloutPlan, TaskOptions, submit

_TASKS = TaskOptions()


@rollout_app.command("submit")
def submit_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Trace file, or task file with --env")],
    policy: Annotated[str, typer.Option(help=f"System bundle: {', '.join(SYSTEMS)}")] = "heddle",
    env: EnvOpt = None,
    group_size: GroupOpt = _TASKS.group_size,
    seed: SeedOpt = 0,
    tokenizer: TokenizerOpt = "byte",
    time_scale: Annotated[
        float, typer.Option(help="Time scale of the workers (sim engines), for the summary")
    ] = 1.0,
    as_json: JsonOpt = False,
) -> None:
    """Submit a trace or task file to a running control plane (`heddle up`); print its id."""
    if policy not in SYSTEMS:
        raise UserError(f"unknown --policy {policy!r}; choose from {', '.join(SYSTEMS)}")
    trace = file if env is None else None
    tasks = file if env is not None else None
    source = source_from_flags(None, trace, tasks, env, 0, seed, group_size, tokenizer)
    plan = rollout_plan(policy, source, time_scale)
    rollout_id = asyncio.run(_submit(settings_of(ctx), plan))
    if as_json:
        typer.echo(json.dumps({"rollout_id": rollout_id, "num_trajectories": len(plan.specs)}))
    else:
        typer.echo(rollout_id)


async def _submit(settings: Settings, plan: RolloutPlan) -> str:
    from heddle.bus import Bus

    async with Bus(settings) as bus:
        await require_control_plane(bus)
        return await submit(bus, plan)


@rollout_app.command("cancel")
def cancel_command(
    ctx: typer.Context,
    rollout_id: Annotated[str, typer.Argument(help="The rollout to cancel")],
    reason: Annotated[str, typer.Option(help="Recorded with the cancellation")] = "cancelled",
) -> None:
    """Cancel a rollout: its trajectories are aborted and get no further commands."""
    from heddle.bus import Bus
    from heddle.ids import check_token
    from heddle.rollout.control_plane import cancel_rollout

    try:
        check_token(rollout_id, "rollout id")
    except ValueError as exc:
        raise UserError(str(exc)) from None

    async def cancel() -> None:
        async with Bus(settings_of(ctx)) as bus:
            await cancel_rollout(bus, rollout_id, reason)

    asyncio.run(cancel())
    typer.echo(f"cancelled {rollout_id}")


@rollout_app.command("delete-payloads")
def delete_payloads_command(
    ctx: typer.Context,
    rollout_id: Annotated[str, typer.Argument(help="The finished rollout")],
) -> None:
    """Delete a rollout's offloaded arrays (bucket heddle-payloads) before their 7-day expiry.
    Its events stay: the ledger and replay need only the counts they carry; the trainer can no
    longer read the token values of those fields."""
    from heddle.bus import Bus
    from heddle.ids import check_token

    try:
        check_token(rollout_id, "rollout id")
    except ValueError as exc:
        raise UserError(str(exc)) from None

    async def delete() -> int:
        async with Bus(settings_of(ctx)) as bus:
            return await bus.delete_payloads(rollout_id)

    typer.echo(f"deleted {asyncio.run(delete())} payload objects of {rollout_id}")
