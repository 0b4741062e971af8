"""Where a simulated trajectory's time goes: one column for every state it can be in, so that
its columns sum to its total (issue 36, "every second accounted").

A trajectory is in exactly one column at every instant from its submission (time 0) to its end.
The data plane moves it between columns as its state changes (``TimeAccount.enter``); a
generation is one ``ENGINE`` stretch from submission to the engine's finish, split there into
the engine's queue, prefill and decode (``settle``: the batching model's parts, which sum to the
stretch), or charged to ``RERUN`` when abandoned. The columns, in the order reported:

- ``admission``: submitted, not yet started: the control plane holds it before placing it
  (KV admission, a concurrency cap): waiting for placement;
- ``held``: started, ready for its next step, no command sent for it: the control plane holds
  it between steps (a paused program);
- ``control``: a command to run it (start or continue) is on its way: the control plane's
  decision and routing latency (``heddle.sim.command_delays``);
- ``weights``: held at its worker while the worker drains and swaps weights;
- ``queue``: in its engine's waiting queue (after a preemption too);
- ``prefill``, ``decode``: in its engine's batch;
- ``rerun``: a generation abandoned part-way (re-placed mid-step, or failed): time lost;
- ``tool``: its tool call runs;
- ``tool_queue``: its tool call waits for an executor (a cold start);
- ``migration``: its step is ready but waits for its move (KV transfer or warm-up) to land;
- ``reshard``: its step is ready but waits for a re-shard: its engine stopped (it is handed to
  the merged worker) or relaunches at a new TP degree (``heddle.sim.reshards``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from heddle.policy.batching import FinishedGeneration


class Column(enum.IntEnum):
    ADMISSION = 0
    HELD = 1
    CONTROL = 2
    WEIGHTS = 3
    QUEUE = 4
    PREFILL = 5
    DECODE = 6
    RERUN = 7
    TOOL = 8
    TOOL_QUEUE = 9
    MIGRATION = 10
    RESHARD = 11
    ENGINE = 12
    """A generation in flight: settled into QUEUE, PREFILL and DECODE, or RERUN. Never
    reported."""

    @property
    def key(self) -> str:
        """Its name in reports: ``queue_s``, ``tool_queue_s``, ..."""
        return f"{self.name.lower()}_s"


REPORTED: tuple[Column, ...] = tuple(c for c in Column if c is not Column.ENGINE)
COLUMN_KEYS: tuple[str, ...] = tuple(c.key for c in REPORTED)
"""The breakdown's columns, in report order; they sum to the trajectory's total."""


@dataclass(slots=True)
class TimeAccount:
    """Seconds per column of one trajectory, the column it is in and since when."""

    column: Column | None = Column.ADMISSION
    """None once it has ended."""
    since_s: float = 0.0
    seconds: list[float] = field(default_factory=lambda: [0.0] * len(Column))

    def enter(self, column: Column | None, now: float) -> None:
        """From ``now`` on it is in ``column`` (None: it has ended)."""
        if self.column is not None:
            self.seconds[self.column] += now - self.since_s
        self.column, self.since_s = column, now

    def settle(self, done: FinishedGeneration, now: float, then: Column | None) -> None:
        """The generation in flight finished at ``now``: its stretch goes to the engine's
        queue, prefill and decode (decode takes the rounding, so the sum stays exact); from
        ``now`` on it is in ``then``."""
        self.enter(then, now)
        stretch = self.seconds[Column.ENGINE]
        self.seconds[Column.ENGINE] = 0.0
        self.seconds[Column.QUEUE] += done.queue_s
        self.seconds[Column.PREFILL] += done.prefill_s
        self.seconds[Column.DECODE] += stretch - done.queue_s - done.prefill_s

    def abandon(self, now: float, then: Column | None) -> None:
        """The generation in flight was dropped at ``now``: its stretch was lost."""
        self.enter(then, now)
        self.seconds[Column.RERUN] += self.seconds[Column.ENGINE]
        self.seconds[Column.ENGINE] = 0.0

    def move(self, seconds: float, source: Column, target: Column) -> None:
        """Re-file up to ``seconds`` already counted in ``source`` under ``target``."""
        moved = min(max(0.0, seconds), self.seconds[source])
        self.seconds[source] -= moved
        self.seconds[target] += moved

    def of(self, column: Column) -> float:
        return self.seconds[column]

    def columns(self, now: float | None = None) -> dict[str, float]:
        """The reported columns (counting the current one up to ``now`` when given)."""
        seconds = list(self.seconds)
        if now is not None and self.column is not None:
            seconds[self.column] += now - self.since_s
        return {column.key: seconds[column] for column in REPORTED}


def waiting_column(
    *,
    has_started: bool,
    is_waiting_for_weights: bool,
    has_command: bool,
    is_waiting_for_reshard: bool = False,
) -> Column:
    """The column of a trajectory ready to generate but not in an engine."""
    if is_waiting_for_reshard:
        return Column.RESHARD
    if is_waiting_for_weights:
        return Column.WEIGHTS
    if has_command:
        return Column.CONTROL
    return Column.HELD if has_started else Column.ADMISSION
