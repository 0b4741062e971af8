"""`heddle deploy`: what a multi-machine deployment needs besides Heddle itself.

heddle deploy auth --out secrets/nats --worker gpu0,gpu1 --trainer grpo
    # auth.conf for nats-server; control_plane.nk, ..., worker-gpu0.nk, trainer-grpo.nk
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from heddle.cli.apps import app
from heddle.deploy.auth import AUTH_CONFIG_NAME, credential_path, write_auth

deploy_app = typer.Typer(help="Deployment: NATS permissions and credentials per identity.")
app.add_typer(deploy_app, name="deploy", no_args_is_help=True)


def _names(values: list[str] | None) -> list[str]:
    """Repeated options, each possibly comma-separated (``--worker a,b --worker c``)."""
    return [name.strip() for value in values or () for name in value.split(",") if name.strip()]


@deploy_app.command("auth")
def auth_command(
    out: Annotated[Path, typer.Option(help="Folder for auth.conf and the credentials")],
    worker: Annotated[
        list[str] | None,
        typer.Option(
            "--worker",
            "--workers",
            help="A worker id (its --id) to write a credential for; repeat it or separate "
            "ids with commas. Each worker has its own.",
        ),
    ] = None,
    trainer: Annotated[
        list[str] | None,
        typer.Option(
            "--trainer",
            "--trainers",
            help="A trainer name (HeddleClient(trainer=...)) to write a credential for; "
            "repeat it or separate names with commas.",
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="New keys for every identity (earlier seeds are replaced)")
    ] = False,
) -> None:
    """Write a nats-server authorization config and one nkey credential per identity: the
    shared roles, each worker, each trainer. Seeds already in OUT are kept (run it again with
    more --worker to add workers, then reload the servers)."""
    try:
        credentials = write_auth(
            out, workers=_names(worker), trainers=_names(trainer), overwrite=overwrite
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    typer.echo(f"{out / AUTH_CONFIG_NAME}: include it in every nats-server's configuration")
    for entry in credentials:
        path = credential_path(out, entry.role.identity)
        typer.echo(f"{path}: --nats-creds of {entry.role.description}")
    if not any(entry.role.identity.kind == "worker" for entry in credentials):
        typer.echo("no worker credential: each worker needs its own (--worker ID)", err=True)
