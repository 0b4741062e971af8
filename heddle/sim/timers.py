"""What the simulated data plane asks the simulator to call back for, and when."""

from __future__ import annotations

import enum
from typing import Protocol


class TimerKind(enum.IntEnum):
    WAKE = 0
    """A worker's next generation finishes (key: worker id)."""
    TOOL = 1
    """A tool call returns (key: trajectory id)."""
    TRANSFER = 2
    """A migration's transfer ends (key: trajectory id)."""
    PUBLISH = 3
    """The trainer publishes a weight version (key: the version)."""
    WEIGHTS = 4
    """A worker's weight swap ends (key: worker id)."""
    COMMAND = 5
    """A command the control plane sent reaches the data plane (key: its send number)."""
    RELAUNCH = 6
    """A worker's engine is up again at its new TP degree after a re-shard (key: worker id)."""
    RETIRE = 7
    """A worker retiring for a re-shard has stopped its engine (key: worker id)."""


class Timer(Protocol):
    def at(self, time_s: float, kind: TimerKind, key: str) -> None: ...
