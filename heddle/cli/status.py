"""`heddle status`: rollouts, workers, tool executors (and their sandbox isolation level), the
slowest trajectories, consumers and dead letters.

    heddle status                 # the active (latest running, else latest) rollout
    heddle status r-20261130-1 --slowest 10 --json

Reads the ledger (``<data_dir>/ledger.db`` or ``HEDDLE_DATABASE_URL``) and the status file a
running control plane keeps in the data dir; it starts nothing and writes nothing. Without a
ledger it says so in one line.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import msgspec
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from heddle.cli.apps import app, settings_of
from heddle.config import Settings
from heddle.controlplane.ledger_health import LedgerHealth, read_health
from heddle.controlplane.snapshot import (
    StatusSnapshot,
    WorkerLine,
    collect_status,
    status_consumers,
)
from heddle.controlplane.status import read_status
from heddle.controlplane.store_guard import StoreReport
from heddle.errors import UserError
from heddle.ledger import Ledger, open_ledger
from heddle.ledger.integrity import LedgerCorrupt, reading
from heddle.ledger.statuses import RolloutStatus
from heddle.observability.probe import probe_stream

_SILENT_AFTER_S = 10.0
"""A worker or control plane silent this long is shown as silent."""


def open_existing_ledger(settings: Settings) -> Ledger:
    """The configured ledger; UserError (one line) when there is none to read."""
    if settings.database_url is None:
        path = settings.embedded_ledger_path
        if not path.is_file():
            raise UserError(
                f"no ledger at {path}: nothing has run with this data dir yet "
                "(start `heddle rollout run` or `heddle up`, or set HEDDLE_DATABASE_URL)"
            )
    try:
        return open_ledger(settings.ledger_url, auto_upgrade=settings.database_url is None)
    except UserError:
        raise
    except Exception as exc:  # the driver's own error types stay inside heddle.ledger
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot read the ledger at {settings.ledger_url}: {reason}") from None


@app.command("status")
def status_command(
    ctx: typer.Context,
    rollout_id: Annotated[
        str | None, typer.Argument(help="Rollout to detail (default: the active one)")
    ] = None,
    slowest: Annotated[int, typer.Option(help="How many slowest trajectories to list")] = 5,
    rollouts: Annotated[int, typer.Option(help="How many recent rollouts to list")] = 10,
    nats: Annotated[
        bool, typer.Option(help="Read consumer lag from NATS when a server is running")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Rollouts, workers, the slowest trajectories, consumer positions and dead letters."""
    if slowest < 0 or rollouts < 1:
        raise UserError("--slowest must be >= 0 and --rollouts >= 1")
    settings = settings_of(ctx)
    health = read_health(settings.data_dir)
    ledger = open_existing_ledger(settings)
    try:
        with reading(ledger.url):
            control = read_status(settings.data_dir)
            durables = status_consumers(ledger, control)
            stream = asyncio.run(probe_stream(settings, durables)) if nats else None
            snapshot = collect_status(
                ledger,
                control,
                now=time.time(),
                rollout_id=rollout_id,
                max_rollouts=rollouts,
                num_slowest=slowest,
                stream=stream,
                ledger_health=health,
            )
    except LedgerCorrupt as exc:
        raise UserError(f"{exc}{_health_hint(health)}") from None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    finally:
        ledger.close()
    if as_json:
        typer.echo(msgspec.json.encode(snapshot).decode())
    else:
        print_status(snapshot, Console())


def print_status(snapshot: StatusSnapshot, console: Console) -> None:
    head = snapshot.stream_last_sequence
    stream = f"; events stream at #{head}" if head is not None else "; NATS not reached"
    console.print(f"ledger: {snapshot.ledger_url}{stream}", highlight=False)
    if snapshot.ledger_health is not None:
        console.print(describe_health(snapshot.ledger_health), highlight=False)
    _print_control_plane(snapshot, console)
    console.print(_rollouts_table(snapshot))
    console.print(_workers_table(snapshot))
    if snapshot.executors:
        console.print(_executors_table(snapshot))
    if snapshot.focus_rollout_id is not None:
        console.print(_slowest_table(snapshot))
    console.print(_consumers_table(snapshot))
    console.print(f"dead letters: {snapshot.num_dead_letters}", highlight=False)


def describe_health(health: LedgerHealth) -> str:
    """The keeper's report in one line (red while the figures below are not whole)."""
    copy = f"; the damaged file is at {escape(health.corrupt_copy)}" if health.corrupt_copy else ""
    reason = escape(health.reason)
    if health.state == "stopped":
        return f"[red]ledger projection STOPPED: {reason}; the figures below are stale[/]"
    if health.state == "rebuilding":
        return (
            f"[red]ledger damaged ({reason}): rebuilding it from the stream, at "
            f"#{health.position} of #{health.target_sequence}{copy}; the figures below are "
            "partial until then[/]"
        )
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(health.updated_at))
    return f"ledger rebuilt from the stream at {when} after damage ({reason}){copy}"


def _health_hint(health: LedgerHealth | None) -> str:
    if health is not None and health.state == "stopped":
        return f"; projection stopped: {health.reason}"
    return (
        "; a running projector (heddle up, heddle rollout run) moves it aside and rebuilds it "
        "from the stream"
    )


def _print_control_plane(snapshot: StatusSnapshot, console: Console) -> None:
    control = snapshot.control_plane
    if control is None:
        console.print("control plane: no status file in the data dir (not running here)")
        return
    state = "ready" if control.is_ready else "starting"
    if control.report_age_s > _SILENT_AFTER_S:
        state = f"silent for {control.report_age_s:.0f} s (stopped?)"
    console.print(
        f"control plane: pid {control.pid}, {state}, predictor {control.predictor or '-'}, "
        f"policies {', '.join(control.policies) or '-'}",
        highlight=False,
    )
    if control.store is not None:
        line = describe_store(control.store)
        if line:
            console.print(line, highlight=False)
    for line in durable_warnings(snapshot):
        console.print(line, style="bold red", highlight=False)


def describe_store(store: StoreReport) -> str:
    """The JetStream store's state in one line ('' when it takes writes and nothing happened)."""
    resets = ""
    if store.num_resets:
        when = time.strftime("%H:%M:%S", time.localtime(store.last_reset_at))
        resets = f"; JetStream reset {store.num_resets} time(s), last at {when}"
    if store.is_writable:
        return f"JetStream store: takes writes{resets}" if resets else ""
    since = time.strftime("%H:%M:%S", time.localtime(store.since))
    free = "" if store.free_bytes is None else f"; {store.free_bytes / (1 << 20):.1f} MiB free"
    return (
        f"[red]JetStream store REFUSES WRITES since {since}: {escape(store.reason)}{free}; "
        f"producers are paused; {escape(store.action)}{resets}[/]"
    )


def durable_warnings(snapshot: StatusSnapshot) -> list[str]:
    """What ``heddle status`` says about durables that disappeared."""
    lines = []
    for c in snapshot.consumers:
        if c.is_missing:
            lines.append(
                f"durable {c.consumer} is MISSING on the server (deleted, or lost): the control "
                f"plane recreates it after #{c.position} when it notices or restarts"
            )
        if c.num_durable_losses:
            when = time.strftime("%H:%M:%S", time.localtime(c.durable_lost_at))
            lines.append(
                f"durable {c.consumer} disappeared {c.num_durable_losses} time(s), last at "
                f"{when}; recreated after #{c.recreated_after} (nothing skipped)"
            )
    return lines


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left")
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    return table


def _rollouts_table(snapshot: StatusSnapshot) -> Table:
    table = _table(
        "rollouts (makespan in model s)",
        "rollout",
        "policy",
        "state",
        "done/total",
        "failed",
        "makespan s",
    )
    for r in snapshot.rollouts:
        makespan = "-" if r.makespan_s is None else f"{r.makespan_s:.1f}"
        if r.status is RolloutStatus.RUNNING and r.makespan_s is not None:
            makespan += " so far"
        table.add_row(
            r.rollout_id,
            r.policy,
            r.status,
            f"{r.num_completed}/{r.num_trajectories}",
            str(r.num_failed),
            makespan,
        )
    return table


def _workers_table(snapshot: StatusSnapshot) -> Table:
    table = _table(
        "workers",
        "worker",
        "engine",
        "TP",
        "running/max",
        "waiting",
        "trajs",
        "KV",
        "heartbeat",
        "state",
    )
    for w in snapshot.workers:
        age = "-" if w.heartbeat_age_s is None else f"{w.heartbeat_age_s:.1f} s ago"
        table.add_row(
            w.worker_id,
            w.engine,
            str(w.tp_degree),
            f"{w.num_running}/{w.max_running or '-'}",
            str(w.num_waiting),
            str(w.num_trajectories),
            f"{w.kv_usage:.0%}",
            age,
            _worker_state(w),
        )
    if any(not w.state for w in snapshot.workers):
        table.caption = "?: the control plane did not answer; the ledger's last word"
    return table


def _worker_state(worker: WorkerLine) -> str:
    """The control plane's state (what `heddle ops status` says), ``silent`` for a live one not
    heard from lately; the ledger's with a ``?`` when the control plane did not answer."""
    if not worker.state:
        return f"{worker.status}?"
    is_silent = worker.heartbeat_age_s is not None and worker.heartbeat_age_s > _SILENT_AFTER_S
    return "silent" if worker.state == "active" and is_silent else worker.state


def _executors_table(snapshot: StatusSnapshot) -> Table:
    table = _table("tool executors", "executor", "pool", "isolation", "by", "host", "registered")
    for e in snapshot.executors:
        isolation = e.isolation if e.isolation != "process" else "process (UNISOLATED)"
        age = f"{e.registered_age_s:.0f} s ago"
        table.add_row(e.executor_id, e.pool, isolation, e.isolation_detail, e.host, age)
    return table


def _slowest_table(snapshot: StatusSnapshot) -> Table:
    table = _table(
        f"slowest trajectories of {snapshot.focus_rollout_id} (model s)",
        "trajectory",
        "state",
        "worker",
        "elapsed",
        "queue",
        "prefill",
        "decode",
        "tool",
        "migration",
        "steps",
        "tokens",
        "preempt",
        "migr",
    )
    for t in snapshot.slowest:
        table.add_row(
            t.traj_id,
            t.status,
            t.worker_id or "-",
            f"{t.elapsed_s:.1f}",
            *(f"{v:.1f}" for v in (t.queue_s, t.prefill_s, t.decode_s, t.tool_s, t.migration_s)),
            str(t.num_steps),
            str(t.num_output_tokens),
            str(t.num_preemptions),
            str(t.num_migrations),
        )
    return table


def _consumers_table(snapshot: StatusSnapshot) -> Table:
    table = _table("consumers", "consumer", "position", "lag", "live", "batch ms p50/p99")
    for c in snapshot.consumers:
        live = "-" if c.is_live is None else ("yes" if c.is_live else "no")
        if c.is_missing:
            live = "MISSING"
        latency = (
            "-" if c.batch_ms_p50 is None else f"{c.batch_ms_p50:.2f}/{c.batch_ms_p99 or 0:.2f}"
        )
        table.add_row(
            c.consumer, str(c.position), "?" if c.lag is None else str(c.lag), live, latency
        )
    return table
