"""`heddle ops ...`: the operations service from the shell, for people without the NATS CLI.

    heddle ops status
    heddle ops rollout-info <rid>
    heddle ops trajectory-info <rid> <tid>
    heddle ops drain w01 --reason "kernel upgrade"      heddle ops undrain w01
    heddle ops reprioritize <rid> <tid> 1e9 --pin
    heddle ops abort <rid> <tid> --reason "stuck"
    heddle ops cancel <rid> --reason "bad checkpoint"

Each command sends the very request `nats req heddle.ops.<endpoint> '<json>'` sends
(``heddle.controlplane.operations``) and prints the JSON reply; an error reply prints its message
and code and exits 1.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated, Any

import msgspec
import typer
from rich.console import Console

from heddle.bus import Bus, BusOptions
from heddle.bus.micro import ServiceRefusal, ServiceUnavailable, request
from heddle.cli.apps import app, settings_of
from heddle.controlplane.operations import ops_subject
from heddle.errors import UserError

ops_app = typer.Typer(help="Steer and query a running control plane (the `heddle` service).")
app.add_typer(ops_app, name="ops", no_args_is_help=True)

ReasonOpt = Annotated[str, typer.Option(help="Why (recorded in the operator event)")]
OperatorOpt = Annotated[str, typer.Option(help="Who (when the server does not authenticate)")]
ReplyTimeoutOpt = Annotated[float, typer.Option(help="Seconds to wait for the reply")]


def send(ctx: typer.Context, endpoint: str, body: dict[str, Any], timeout_s: float) -> None:
    """Send one request to ``heddle.ops.<endpoint>`` and print the reply (exit 1 on refusal)."""
    payload = msgspec.json.encode({k: v for k, v in body.items() if v not in ("", None)})
    try:
        reply = asyncio.run(_send(ctx, ops_subject(endpoint), payload, timeout_s))
    except ServiceUnavailable as exc:
        raise UserError(f"{exc} (is `heddle up` running on this NATS?)") from None
    except ServiceRefusal as refusal:
        Console(stderr=True).print(f"[red]refused ({refusal.code}):[/red] {refusal.message}")
        sys.exit(1)
    print(reply.decode())


async def _send(ctx: typer.Context, subject: str, payload: bytes, timeout_s: float) -> bytes:
    async with Bus(settings_of(ctx), BusOptions(name="heddle-ops")) as bus:
        return await request(bus, subject, payload, timeout_s)


@ops_app.command("status")
def status(ctx: typer.Context, timeout: ReplyTimeoutOpt = 5.0) -> None:
    """Every rollout and worker the control plane knows."""
    send(ctx, "status", {}, timeout)


@ops_app.command("rollout-info")
def rollout_info(ctx: typer.Context, rollout_id: str, timeout: ReplyTimeoutOpt = 5.0) -> None:
    """One rollout: state, counts, where its trajectories run."""
    send(ctx, "rollout.info", {"rollout_id": rollout_id}, timeout)


@ops_app.command("trajectory-info")
def trajectory_info(
    ctx: typer.Context, rollout_id: str, traj_id: str, timeout: ReplyTimeoutOpt = 5.0
) -> None:
    """One trajectory: state, worker and history, priority, operator actions."""
    send(ctx, "trajectory.info", {"rollout_id": rollout_id, "traj_id": traj_id}, timeout)


@ops_app.command("drain")
def drain(
    ctx: typer.Context,
    worker_id: str,
    reason: ReasonOpt = "",
    operator: OperatorOpt = "",
    timeout: ReplyTimeoutOpt = 5.0,
) -> None:
    """Place nothing new on a worker; it finishes what it holds and reports drained."""
    body = {"worker_id": worker_id, "reason": reason, "operator": operator}
    send(ctx, "worker.drain", body, timeout)


@ops_app.command("undrain")
def undrain(
    ctx: typer.Context,
    worker_id: str,
    reason: ReasonOpt = "",
    operator: OperatorOpt = "",
    timeout: ReplyTimeoutOpt = 5.0,
) -> None:
    """Place on a drained worker again."""
    body = {"worker_id": worker_id, "reason": reason, "operator": operator}
    send(ctx, "worker.undrain", body, timeout)


@ops_app.command("reprioritize")
def reprioritize(
    ctx: typer.Context,
    rollout_id: str,
    traj_id: str,
    priority: float,
    pin: Annotated[bool, typer.Option(help="Keep it: the policy no longer changes it")] = False,
    reason: ReasonOpt = "",
    operator: OperatorOpt = "",
    timeout: ReplyTimeoutOpt = 5.0,
) -> None:
    """Set a trajectory's priority (larger runs first) on whichever worker holds it."""
    body = {
        "rollout_id": rollout_id,
        "traj_id": traj_id,
        "priority": priority,
        "pin": pin or None,
        "reason": reason,
        "operator": operator,
    }
    send(ctx, "trajectory.reprioritize", body, timeout)


@ops_app.command("abort")
def abort(
    ctx: typer.Context,
    rollout_id: str,
    traj_id: str,
    reason: ReasonOpt = "",
    operator: OperatorOpt = "",
    timeout: ReplyTimeoutOpt = 5.0,
) -> None:
    """Abort one trajectory where it runs (it ends failed, not retried)."""
    body = {"rollout_id": rollout_id, "traj_id": traj_id, "reason": reason, "operator": operator}
    send(ctx, "trajectory.abort", body, timeout)


@ops_app.command("cancel")
def cancel_rollout(
    ctx: typer.Context,
    rollout_id: str,
    reason: ReasonOpt = "",
    operator: OperatorOpt = "",
    timeout: ReplyTimeoutOpt = 5.0,
) -> None:
    """Cancel a rollout: its trajectories are aborted, no more commands go out for it."""
    body = {"rollout_id": rollout_id, "reason": reason, "operator": operator}
    send(ctx, "rollout.cancel", body, timeout)
