"""`heddle deploy`: what a multi-machine deployment needs besides Heddle itself.

heddle deploy auth --out secrets/nats      # auth.conf for nats-server, one <role>.nk each
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from heddle.cli.apps import app
from heddle.deploy.auth import AUTH_CONFIG_NAME, credential_path, write_auth

deploy_app = typer.Typer(help="Deployment: NATS permissions and credentials per role.")
app.add_typer(deploy_app, name="deploy", no_args_is_help=True)


@deploy_app.command("auth")
def auth_command(
    out: Annotated[Path, typer.Option(help="Folder for auth.conf and the credentials")],
    overwrite: Annotated[
        bool, typer.Option(help="Replace the files of an earlier run (new keys for every role)")
    ] = False,
) -> None:
    """Write a nats-server authorization config and one nkey credential per role."""
    credentials = write_auth(out, overwrite=overwrite)
    typer.echo(f"{out / AUTH_CONFIG_NAME}: include it in every nats-server's configuration")
    for credential in credentials:
        path = credential_path(out, credential.role.name)
        typer.echo(f"{path}: --nats-creds of {credential.role.description}")
