"""`heddle db`: ledger database administration.

heddle db upgrade            # migrate the configured database to the latest schema
heddle db revision           # the schema revision it is at
heddle db project            # (hidden) run the ledger projector in the foreground
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from heddle.cli.apps import db_app, settings_of
from heddle.controlplane.projector import ProjectorConfig
from heddle.controlplane.projector_process import serve_projector
from heddle.ledger import LEDGER_CONSUMER, create_ledger_engine, current_revision, head_revision
from heddle.ledger.migrate import ensure_schema


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Migrate the ledger database to the latest schema (creating it if empty)."""
    settings = settings_of(ctx)
    engine = create_ledger_engine(settings.ledger_url)
    try:
        before = current_revision(engine)
        ensure_schema(engine, auto_upgrade=True)
        after = current_revision(engine)
    finally:
        engine.dispose()
    url = engine.url.render_as_string(hide_password=True)
    if before == after:
        typer.echo(f"{url}: already at revision {after}")
    else:
        typer.echo(f"{url}: upgraded from {before or 'an empty database'} to {after}")


@db_app.command("revision")
def db_revision(ctx: typer.Context) -> None:
    """Print the ledger's schema revision and the latest one Heddle knows."""
    engine = create_ledger_engine(settings_of(ctx).ledger_url)
    try:
        current = current_revision(engine)
    finally:
        engine.dispose()
    typer.echo(f"current: {current or 'none (empty database)'}; latest: {head_revision()}")


@db_app.command("project", hidden=True)
def db_project(
    ctx: typer.Context,
    consumer: Annotated[str, typer.Option(help="Durable consumer name.")] = LEDGER_CONSUMER,
    batch_size: Annotated[int, typer.Option(help="Events per transaction.")] = 1000,
    until_idle: Annotated[bool, typer.Option(help="Exit once caught up.")] = False,
) -> None:
    """Run the ledger projector (stops on SIGTERM / Ctrl-C after the current batch)."""
    config = ProjectorConfig(consumer=consumer, batch_size=batch_size)
    stats = asyncio.run(serve_projector(settings_of(ctx), config, until_idle=until_idle))
    Console(stderr=True).print(f"projected {stats.num_projected} events; position {stats.position}")
