"""The records of ThunderAgent's program-aware scheduler (``program_gate``): one ``Program``
per trajectory and one ``Backend`` per worker, with the KV capacity arithmetic of
the public code (``ThunderAgent-org/ThunderAgent``, ``ThunderAgent/backend/state.py``,
``BackendState``).

A backend's used capacity is the summed ``total_tokens`` (the context) of its REASONING programs
(generating, or with a request waiting) plus ``acting_token_weight`` times that of its ACTING
ones (in a tool call), plus ``BUFFER_PER_PROGRAM`` tokens per program registered there
(``active_program_tokens``, ``remaining_capacity``). The code also subtracts ``shared_tokens``, a
prefix-cache saving read from the engine's metrics; ``update_shared_tokens`` is never called in
the released code, so it stays 0, and so it is here. A worker that reports no KV capacity has
room for anything (``remaining_capacity`` is infinite without a cache config).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from heddle.control.placement.admission import Key

BUFFER_PER_PROGRAM = 100
"""Tokens reserved per registered program for decode headroom (``BUFFER_PER_PROGRAM``)."""


class Status(Enum):
    REASONING = "reasoning"
    """On the GPU: generating, or with its next request waiting."""
    ACTING = "acting"
    """Off the GPU: in a tool call."""


@dataclass(slots=True)
class Program:
    """One trajectory (a ``program_id``), ACTIVE on ``backend`` or PAUSED in the global pool."""

    arrival: int
    """Plan order (ties of equal size resolve by it)."""
    total_tokens: int
    status: Status = Status.REASONING
    backend: str | None = None
    """Where it is registered (None while paused)."""
    origin: str | None = None
    """Where it ran before its pause (None: it never ran)."""
    is_paused: bool = False
    has_started: bool = False
    marked_tokens: int = 0
    """Tokens it added to its backend's ``future_paused_tokens`` when marked (0: not marked)."""
    paused_tokens: int = 0
    """Its tokens when it entered the pool (the pool's sort key, ``PausedInfo.total_tokens``)."""
    paused_at_s: float = 0.0

    @property
    def is_marked(self) -> bool:
        return self.marked_tokens > 0

    @property
    def resume_group(self) -> int:
        """The pool's resume priority (``_greedy_resume``): 0 with a request waiting, 1 never
        started, 2 paused in a tool call."""
        if not self.has_started:
            return 1
        return 0 if self.status is Status.REASONING else 2


@dataclass(slots=True)
class Backend:
    capacity_tokens: int
    """``total_tokens_capacity`` (0: unknown)."""
    programs: dict[Key, Program] = field(default_factory=dict)
    future_paused_tokens: int = 0
    """Tokens of REASONING programs marked for pause (``future_paused_tokens``)."""

    def active_tokens(self, acting_weight: float) -> float:
        reasoning = sum(
            p.total_tokens for p in self.programs.values() if p.status is Status.REASONING
        )
        acting = sum(p.total_tokens for p in self.programs.values() if p.status is Status.ACTING)
        return reasoning + acting_weight * acting

    def remaining(self, acting_weight: float) -> float:
        """``remaining_capacity``: capacity less the active tokens and the buffers."""
        if self.capacity_tokens <= 0:
            return math.inf
        used = self.active_tokens(acting_weight) + BUFFER_PER_PROGRAM * len(self.programs)
        return self.capacity_tokens - used

    def smallest(self, status: Status) -> tuple[Key, Program] | None:
        """Its unmarked program of ``status`` with the fewest tokens (``_get_*_programs_sorted``,
        ties by arrival)."""
        candidates = [
            (key, p) for key, p in self.programs.items() if p.status is status and not p.is_marked
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda item: (item[1].total_tokens, item[1].arrival))
