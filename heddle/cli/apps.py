"""The Typer application tree. Command modules import their group from here and register on it."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from heddle.config import Settings, load_settings

app = typer.Typer(
    name="heddle",
    help="Trajectory-centric rollout orchestrator for agentic RL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
bench_app = typer.Typer(help="Benchmarks; each prints figures (--json for one JSON object).")
db_app = typer.Typer(help="Ledger database administration.")
sim_app = typer.Typer(help="Discrete-event simulation of rollouts under each policy.")
tools_app = typer.Typer(help="Sandboxed tool executors.")
workers_app = typer.Typer(help="Rollout worker agents.")
rollout_app = typer.Typer(help="Run, submit and compare rollouts (the main job).")

app.add_typer(bench_app, name="bench", no_args_is_help=True)
app.add_typer(db_app, name="db", no_args_is_help=True)
app.add_typer(sim_app, name="sim", no_args_is_help=True)
app.add_typer(tools_app, name="tools", no_args_is_help=True)
app.add_typer(workers_app, name="workers", no_args_is_help=True)
app.add_typer(rollout_app, name="rollout", no_args_is_help=True)


@app.callback()
def root(
    ctx: typer.Context,
    nats_url: Annotated[
        str | None,
        typer.Option(help="NATS server URL (env HEDDLE_NATS_URL; default: embedded server)"),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(help="Ledger SQLAlchemy URL (env HEDDLE_DATABASE_URL; default: SQLite)"),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Local state folder (env HEDDLE_DATA_DIR)")
    ] = None,
    nats_creds: Annotated[
        Path | None,
        typer.Option(
            help="NATS credential file: .creds (JWT) or nkey seed (env HEDDLE_NATS_CREDS)",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    nats_tls_ca: Annotated[
        Path | None,
        typer.Option(
            help="CA certificate (PEM) of the NATS server's TLS (env HEDDLE_NATS_TLS_CA)",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    nats_replicas: Annotated[
        int | None,
        typer.Option(
            help="Stream replicas (env HEDDLE_NATS_REPLICAS; default: 1, or 3 on a cluster)",
            min=1,
            max=5,
        ),
    ] = None,
) -> None:
    ctx.obj = load_settings(
        nats_url=nats_url,
        database_url=database_url,
        data_dir=data_dir,
        nats_creds=nats_creds,
        nats_tls_ca=nats_tls_ca,
        nats_replicas=nats_replicas,
    )


def settings_of(ctx: typer.Context) -> Settings:
    """The settings the root callback resolved (defaults when a command runs standalone)."""
    root_ctx = ctx.find_root()
    return root_ctx.obj if isinstance(root_ctx.obj, Settings) else load_settings()


@contextlib.contextmanager
def fresh_data_dir(base: Path, prefix: str, *, keep: bool = False) -> Iterator[Path]:
    """A new folder under ``base`` for one benchmark run (its embedded NATS and SQLite ledger),
    so a benchmark never writes into a deployment's stream or catches up its backlog; removed
    afterwards unless ``keep`` (then its path goes to stderr)."""
    base.mkdir(parents=True, exist_ok=True)
    if keep:
        kept = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        Console(stderr=True).print(f"data dir kept at {kept}", highlight=False)
        yield kept
        return
    with tempfile.TemporaryDirectory(prefix=prefix, dir=base) as temporary:
        yield Path(temporary)
