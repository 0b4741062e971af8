"""Following a rollout while it runs: completions from the stream, load from worker telemetry.

``RolloutFollower.poll()`` reads the rollout's completions, failures and its end from the stream
since the last poll (an ephemeral ordered read, cheap), and keeps the latest telemetry of every
worker (core NATS, about once a second per worker). ``ProgressView`` renders it with rich on
stderr: trajectories done, tokens per model second, each worker's running and waiting requests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from heddle.bus import Bus, ReplayQuery, TelemetrySubscription
from heddle.events import (
    Completed,
    Failed,
    RolloutCancelled,
    RolloutFinished,
    WorkerTelemetry,
)
from heddle.events.subjects import rollout_subject, trajectory_subjects

_STALE_TELEMETRY_S = 5.0


@dataclass(slots=True)
class ProgressState:
    rollout_id: str
    num_trajectories: int
    time_scale: float
    started_at: float = field(default_factory=time.time)
    completed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    output_tokens: int = 0
    is_finished: bool = False
    is_cancelled: bool = False
    telemetry: dict[str, WorkerTelemetry] = field(default_factory=dict)

    @property
    def num_done(self) -> int:
        return len(self.completed) + len(self.failed)

    @property
    def is_over(self) -> bool:
        return self.is_finished or self.is_cancelled or self.num_done >= self.num_trajectories

    def live_telemetry(self, now: float) -> list[WorkerTelemetry]:
        return [
            report
            for _, report in sorted(self.telemetry.items())
            if now - report.sent_at <= _STALE_TELEMETRY_S
        ]

    def tokens_per_s(self, now: float) -> float:
        """Output tokens per model second over the workers reporting now."""
        return sum(report.tokens_per_s for report in self.live_telemetry(now))


class RolloutFollower:
    """Polls one rollout's end events; ``open`` subscribes to telemetry, ``close`` stops it."""

    def __init__(self, bus: Bus, state: ProgressState) -> None:
        self.bus = bus
        self.state = state
        self._next_sequence = 1
        self._telemetry: TelemetrySubscription | None = None
        rollout_id = state.rollout_id
        self._subjects = (
            *trajectory_subjects(rollout_id, "*", "completed"),
            *trajectory_subjects(rollout_id, "*", "failed"),
            rollout_subject(rollout_id, "finished"),
            rollout_subject(rollout_id, "cancelled"),
        )

    async def open(self, since_sequence: int = 1) -> RolloutFollower:
        self._next_sequence = max(1, since_sequence)
        self._telemetry = await self.bus.subscribe_telemetry(self._on_telemetry)
        return self

    async def close(self) -> None:
        if self._telemetry is not None:
            await self._telemetry.close()
            self._telemetry = None

    async def _on_telemetry(self, report: WorkerTelemetry) -> None:
        self.state.telemetry[report.worker_id] = report

    async def poll(self) -> ProgressState:
        """Fold in what the stream holds since the last poll."""
        query = ReplayQuery(filter_subjects=self._subjects, start_sequence=self._next_sequence)
        reader = self.bus.replay_events(query)
        state = self.state
        async for record in reader:
            self._next_sequence = record.stream_sequence + 1
            match record.message:
                case Completed() as completed:
                    if completed.traj_id not in state.completed:
                        state.completed.add(completed.traj_id)
                        state.failed.discard(completed.traj_id)
                        state.output_tokens += completed.num_output_tokens
                case Failed() as failed:
                    if failed.is_final and failed.traj_id not in state.completed:
                        state.failed.add(failed.traj_id)
                case RolloutFinished():
                    state.is_finished = True
                case RolloutCancelled():
                    state.is_cancelled = True
        self._next_sequence = max(self._next_sequence, reader.last_sequence + 1)
        return state


class ProgressView:
    """A rich live panel on stderr (nothing when disabled)."""

    def __init__(self, enabled: bool, title: str) -> None:
        self.console = Console(stderr=True)
        self.title = title
        self._live = Live(console=self.console, refresh_per_second=4, transient=False)
        self._enabled = enabled

    def __enter__(self) -> ProgressView:
        if self._enabled:
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._enabled:
            self._live.__exit__(None, None, None)

    def update(self, state: ProgressState) -> None:
        if self._enabled:
            self._live.update(render(state, self.title, time.time()))


def render(state: ProgressState, title: str, now: float) -> Group:
    wall_s = now - state.started_at
    header = Text(
        f"{title}: {len(state.completed)}/{state.num_trajectories} done"
        f"{f', {len(state.failed)} failed' if state.failed else ''}, "
        f"{state.tokens_per_s(now):,.0f} tok/s (model time), "
        f"{wall_s:.0f} s wall = {wall_s * state.time_scale:,.0f} s model"
    )
    table = Table(box=None, pad_edge=False)
    for column in ("worker", "running", "waiting", "kv", "tok/s"):
        table.add_column(column, justify="left" if column == "worker" else "right")
    for report in state.live_telemetry(now):
        table.add_row(
            report.worker_id,
            str(report.num_running),
            str(report.num_waiting),
            f"{report.kv_usage:.0%}",
            f"{report.tokens_per_s:,.0f}",
        )
    return Group(header, table)
