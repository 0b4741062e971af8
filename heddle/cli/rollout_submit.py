"""`heddle rollout submit | cancel | delete-payloads`: a rollout on a running control plane
(`heddle up`), through its operations service (the requests of `heddle ops`).

    heddle rollout submit trace.jsonl --policy heddle
    heddle rollout cancel <rollout_id> --reason "bad checkpoint"
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import msgspec
import typer
from rich.console import Console

from heddle.cli.apps import rollout_app, settings_of
from heddle.cli.options import SeedOpt, TokenizerOpt
from heddle.cli.rollout_flags import (
    DeploymentTimeScaleOpt,
    EnvOpt,
    GroupOpt,
    JsonOpt,
    TrainerOpt,
    rollout_plan,
)
from heddle.config import Settings
from heddle.control.systems import SYSTEMS
from heddle.errors import UserError
from heddle.rollout.flags import source_from_flags
from heddle.rollout.submission import RolloutPlan, TaskOptions
from heddle.rollout.submit import (
    CLI_TRAINER,
    SubmissionRefused,
    SubmitReply,
    cancel,
    submit,
)

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
    time_scale: DeploymentTimeScaleOpt = None,
    trainer: TrainerOpt = CLI_TRAINER,
    as_json: JsonOpt = False,
) -> None:
    """Submit a trace or task file to a running control plane (`heddle up`); print its id.
    The control plane checks it first: a refused one prints the reason and exits 2."""
    if policy not in SYSTEMS:
        raise UserError(f"unknown --policy {policy!r}; choose from {', '.join(SYSTEMS)}")
    trace = file if env is None else None
    tasks = file if env is not None else None
    source = source_from_flags(None, trace, tasks, env, 0, seed, group_size, tokenizer)
    plan = rollout_plan(policy, source, time_scale)
    reply = asyncio.run(_submit(settings_of(ctx), plan, trainer))
    if as_json:
        typer.echo(msgspec.json.encode(reply).decode())
    else:
        typer.echo(reply.rollout_id)


async def _submit(settings: Settings, plan: RolloutPlan, trainer: str) -> SubmitReply:
    from heddle.bus import Bus

    async with Bus(settings) as bus:
        return await submit(bus, plan, trainer=trainer)


@rollout_app.command("cancel")
def cancel_command(
    ctx: typer.Context,
    rollout_id: Annotated[str, typer.Argument(help="The rollout to cancel")],
    reason: Annotated[str, typer.Option(help="Recorded with the cancellation")] = "cancelled",
    as_json: JsonOpt = False,
) -> None:
    """Cancel a running rollout: its trajectories are aborted and get no further commands. The
    operations service checks it as `heddle ops cancel` does: an unknown rollout or one that
    already ended is refused (exit 1, with the service's reason)."""
    from heddle.bus import Bus
    from heddle.ids import check_token

    try:
        check_token(rollout_id, "rollout id")
    except ValueError as exc:
        raise UserError(str(exc)) from None

    async def cancel_it() -> bytes:
        async with Bus(settings_of(ctx)) as bus:
            return await cancel(bus, rollout_id, reason)

    try:
        reply = asyncio.run(cancel_it())
    except SubmissionRefused as refusal:  # as `heddle ops cancel` prints it
        Console(stderr=True).print(f"[red]refused ({refusal.code}):[/red] {refusal.message}")
        sys.exit(1)
    typer.echo(reply.decode() if as_json else f"cancelled {rollout_id}")


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
