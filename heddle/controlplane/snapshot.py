"""What ``heddle status`` shows: a snapshot of the ledger and of the running control plane.

Sources: the ledger (rollouts, workers, trajectories, the projector's position, dead letters),
``<data_dir>/ledger-health.json`` (a damaged ledger: rebuilding, rebuilt or stopped) and
``<data_dir>/control-plane.json``, which a running control plane rewrites about once a
second (its consumers' positions, lag and batch latencies), and, when NATS answers, the tool
executors' registrations in the events stream (the sandbox isolation level of each). Times in
the ledger are the publishers' Unix clocks; durations are model seconds (wall seconds x the
rollout's time scale).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from heddle.controlplane.ledger_health import LedgerHealth
from heddle.controlplane.status import ControlPlaneStatus
from heddle.controlplane.store_guard import StoreReport
from heddle.events import ExecutorRegistered
from heddle.ledger import Ledger, queries
from heddle.ledger.rows import RolloutRow, TrajectoryRow, WorkerRow
from heddle.ledger.statuses import RolloutStatus, TrajectoryStatus, WorkerStatus
from heddle.observability.probe import LiveWorker, StreamProbe


class RolloutLine(msgspec.Struct, frozen=True, kw_only=True):
    rollout_id: str
    policy: str
    status: RolloutStatus
    num_trajectories: int
    num_completed: int
    num_failed: int
    makespan_s: float | None
    """Finished: the recorded makespan; running: model seconds since submission (so far)."""
    time_scale: float


class WorkerLine(msgspec.Struct, frozen=True, kw_only=True):
    worker_id: str
    engine: str
    model: str
    tp_degree: int
    status: WorkerStatus
    num_running: int
    max_running: int
    num_waiting: int
    num_trajectories: int
    kv_usage: float
    heartbeat_age_s: float | None
    """Wall seconds since the last heartbeat (None: none yet)."""
    state: str = ""
    """The control plane's word (``heddle ops status``): active, draining, drained or failed;
    "" when it did not answer (then ``status`` is the ledger's, and the load unknown)."""


class TrajectoryLine(msgspec.Struct, frozen=True, kw_only=True):
    traj_id: str
    status: TrajectoryStatus
    worker_id: str
    elapsed_s: float
    """Model seconds from submission to completion (or to now while it runs)."""
    queue_s: float
    prefill_s: float
    decode_s: float
    tool_s: float
    migration_s: float
    num_steps: int
    num_output_tokens: int
    num_preemptions: int
    num_migrations: int


class ConsumerLine(msgspec.Struct, frozen=True, kw_only=True):
    consumer: str
    position: int
    lag: int | None
    """Messages of its subjects not yet taken (None: unknown from here)."""
    is_live: bool | None
    batch_ms_p50: float | None = None
    batch_ms_p99: float | None = None
    is_missing: bool = False
    """NATS was reached and does not know the control plane's durable (deleted, or lost by the
    server; the control plane recreates it where it stopped)."""
    num_durable_losses: int = 0
    """Times its process found the durable missing and recreated it (the control plane's)."""
    durable_lost_at: float = 0.0
    recreated_after: int = 0


class ExecutorLine(msgspec.Struct, frozen=True, kw_only=True):
    executor_id: str
    pool: str
    isolation: str
    """The sandbox level in force: namespace, bwrap, or process (unisolated)."""
    isolation_detail: str
    host: str
    registered_age_s: float


class ControlPlaneLine(msgspec.Struct, frozen=True, kw_only=True):
    pid: int
    is_ready: bool
    report_age_s: float
    """Wall seconds since the control plane last wrote its status (large: it is not running)."""
    predictor: str
    policies: list[str]
    live_workers: list[str]
    store: StoreReport | None = None
    """Whether the JetStream store takes writes, as the control plane last saw it."""


class StatusSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    ledger_url: str
    taken_at: float
    rollouts: list[RolloutLine]
    workers: list[WorkerLine]
    focus_rollout_id: str | None
    """The rollout whose slowest trajectories are listed (named, or the active one)."""
    slowest: list[TrajectoryLine]
    consumers: list[ConsumerLine]
    num_dead_letters: int
    control_plane: ControlPlaneLine | None
    stream_last_sequence: int | None = None
    """The events stream's head, when NATS was reachable."""
    executors: list[ExecutorLine] = []
    """Tool executors' latest registrations (read from NATS; empty when it was not reached)."""
    ledger_health: LedgerHealth | None = None
    """The projector keeper's report when the ledger was damaged (rebuilding, rebuilt, or
    stopped); None when nothing happened."""


def collect_status(
    ledger: Ledger,
    control: ControlPlaneStatus | None,
    *,
    now: float,
    rollout_id: str | None = None,
    max_rollouts: int = 10,
    num_slowest: int = 5,
    stream: StreamProbe | None = None,
    ledger_health: LedgerHealth | None = None,
) -> StatusSnapshot:
    """Read everything ``heddle status`` shows. ValueError when ``rollout_id`` is unknown."""
    ids = queries.rollout_ids(ledger, limit=max_rollouts)
    rollouts = [line for r in ids if (line := _rollout_line(ledger, r, now)) is not None]
    focus = rollout_id or _active(rollouts)
    slowest: list[TrajectoryLine] = []
    if focus is not None:
        summary = queries.rollout_totals(ledger, focus)
        if summary is None:
            raise ValueError(f"no rollout {focus!r} in the ledger at {ledger.url}")
        scale = summary.rollout.time_scale if summary.rollout is not None else 1.0
        slowest = slowest_trajectories(queries.trajectories(ledger, focus), now, scale, num_slowest)
    return StatusSnapshot(
        ledger_url=ledger.url,
        taken_at=now,
        rollouts=rollouts,
        workers=_worker_lines(queries.workers(ledger), stream, now),
        focus_rollout_id=focus,
        slowest=slowest,
        consumers=_consumers(ledger, control, stream),
        num_dead_letters=queries.num_dead_letters(ledger),
        control_plane=_control_plane(control, now),
        stream_last_sequence=stream.last_sequence if stream is not None else None,
        executors=[_executor_line(e, now) for e in (stream.executors if stream else [])],
        ledger_health=ledger_health,
    )


def _executor_line(event: ExecutorRegistered, now: float) -> ExecutorLine:
    return ExecutorLine(
        executor_id=event.executor_id,
        pool=event.pool,
        isolation=event.isolation,
        isolation_detail=event.isolation_detail,
        host=event.host,
        registered_age_s=max(0.0, now - event.occurred_at),
    )


def slowest_trajectories(
    rows: Sequence[TrajectoryRow], now: float, time_scale: float, count: int
) -> list[TrajectoryLine]:
    """The ``count`` trajectories with the longest elapsed model time, longest first."""
    lines = [_trajectory_line(row, now, time_scale) for row in rows]
    lines.sort(key=lambda line: (-line.elapsed_s, line.traj_id))
    return lines[:count]


def _active(rollouts: Sequence[RolloutLine]) -> str | None:
    """The most recent running rollout, else the most recent one."""
    running = [r for r in rollouts if r.status is RolloutStatus.RUNNING]
    chosen = running or rollouts
    return chosen[0].rollout_id if chosen else None


def _rollout_line(ledger: Ledger, rollout_id: str, now: float) -> RolloutLine | None:
    summary = queries.rollout_totals(ledger, rollout_id)
    if summary is None:
        return None
    row = summary.rollout or RolloutRow(rollout_id=rollout_id)
    return RolloutLine(
        rollout_id=rollout_id,
        policy=row.policy,
        status=row.status,
        num_trajectories=max(
            row.num_trajectories,
            summary.num_trajectories - summary.num_by_status.get(TrajectoryStatus.RESUBMITTED, 0),
        ),
        num_completed=summary.num_completed,
        num_failed=summary.num_by_status.get(TrajectoryStatus.FAILED, 0),
        makespan_s=_makespan(row, now),
        time_scale=row.time_scale,
    )


def _makespan(row: RolloutRow, now: float) -> float | None:
    if row.status is RolloutStatus.FINISHED:
        return row.makespan_s
    if row.submitted_at is None:
        return None
    end = row.finished_at if row.finished_at is not None else now
    return max(0.0, end - row.submitted_at) * row.time_scale


def _trajectory_line(row: TrajectoryRow, now: float, time_scale: float) -> TrajectoryLine:
    if row.status is TrajectoryStatus.COMPLETED and row.total_s > 0:
        elapsed_s = row.total_s
    elif row.submitted_at is None:
        elapsed_s = 0.0
    else:
        end = row.completed_at if row.completed_at is not None else now
        elapsed_s = max(0.0, end - row.submitted_at) * time_scale
    return TrajectoryLine(
        traj_id=row.traj_id,
        status=row.status,
        worker_id=row.worker_id,
        elapsed_s=elapsed_s,
        queue_s=row.queue_s,
        prefill_s=row.prefill_s,
        decode_s=row.decode_s,
        tool_s=row.tool_s,
        migration_s=row.migration_s,
        num_steps=row.num_steps,
        num_output_tokens=row.num_output_tokens,
        num_preemptions=row.num_preemptions,
        num_migrations=row.num_migrations,
    )


def _worker_lines(
    rows: Sequence[WorkerRow], stream: StreamProbe | None, now: float
) -> list[WorkerLine]:
    """The ledger's workers, with state, placements and load from the control plane when it
    answered (the ledger holds no heartbeats), and the workers only it knows yet."""
    lines = [_worker_line(row, now) for row in rows]
    live = {w.worker_id: w for w in (stream.workers or [])} if stream is not None else {}
    known = {line.worker_id for line in lines}
    lines += [_unprojected(w) for w_id, w in live.items() if w_id not in known]
    return [_with_live(line, live.get(line.worker_id)) for line in lines]


def _with_live(line: WorkerLine, live: LiveWorker | None) -> WorkerLine:
    if live is None:
        return line
    return msgspec.structs.replace(
        line, state=live.state, num_trajectories=live.num_trajectories,
        num_running=live.num_running, num_waiting=live.num_waiting, kv_usage=live.kv_usage,
        heartbeat_age_s=live.heartbeat_age_s,
    )  # fmt: skip


def _unprojected(live: LiveWorker) -> WorkerLine:
    status = WorkerStatus.FAILED if live.state == "failed" else WorkerStatus.ACTIVE
    return WorkerLine(
        worker_id=live.worker_id, engine=live.engine, model="", tp_degree=1, status=status,
        num_running=0, max_running=0, num_waiting=0, num_trajectories=0, kv_usage=0.0,
        heartbeat_age_s=None,
    )  # fmt: skip


def _worker_line(row: WorkerRow, now: float) -> WorkerLine:
    return WorkerLine(
        worker_id=row.worker_id,
        engine=row.engine,
        model=row.model,
        tp_degree=row.tp_degree,
        status=row.status,
        num_running=row.num_running,
        max_running=row.max_running,
        num_waiting=row.num_waiting,
        num_trajectories=row.num_trajectories,
        kv_usage=row.kv_usage,
        heartbeat_age_s=(
            max(0.0, now - row.last_heartbeat_at) if row.last_heartbeat_at is not None else None
        ),
    )


def status_consumers(ledger: Ledger, control: ControlPlaneStatus | None) -> list[str]:
    """The consumers a status lists: the control plane's, then those with a ledger position."""
    names = [c.durable for c in control.consumers] if control is not None else []
    return names + [p.consumer for p in queries.positions(ledger) if p.consumer not in names]


def _consumers(
    ledger: Ledger, control: ControlPlaneStatus | None, stream: StreamProbe | None
) -> list[ConsumerLine]:
    """The control plane's consumers (from its status file), then the ledger's own positions
    (the projector's) that the file does not list. With a stream probe, lags are read from
    the durables themselves (exact and current)."""
    reported = {c.durable: c for c in control.consumers} if control is not None else {}
    positions = {p.consumer: p.stream_sequence for p in queries.positions(ledger)}
    lines = []
    for name in status_consumers(ledger, control):
        report = reported.get(name)
        position = report.position if report is not None else positions[name]
        lag = report.num_pending if report is not None else None
        probed = stream.durables.get(name) if stream is not None else None
        if probed is not None:
            lag = probed.num_unacked
        elif stream is not None and report is None:
            lag = max(0, stream.last_sequence - position)
        lines.append(
            ConsumerLine(
                consumer=name,
                position=position,
                lag=lag,
                is_live=report.is_live if report is not None else None,
                batch_ms_p50=report.batch_ms_p50 if report is not None else None,
                batch_ms_p99=report.batch_ms_p99 if report is not None else None,
                is_missing=report is not None and stream is not None and probed is None,
                num_durable_losses=report.num_durable_losses if report is not None else 0,
                durable_lost_at=report.durable_lost_at if report is not None else 0.0,
                recreated_after=report.recreated_after if report is not None else 0,
            )
        )
    return lines


def _control_plane(control: ControlPlaneStatus | None, now: float) -> ControlPlaneLine | None:
    if control is None:
        return None
    return ControlPlaneLine(
        pid=control.pid,
        is_ready=control.is_ready,
        report_age_s=max(0.0, now - control.updated_at),
        predictor=control.predictor,
        policies=list(control.policies),
        live_workers=list(control.live_workers),
        store=control.store,
    )
