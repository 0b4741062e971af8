"""Admission: which placed trajectories start now, and where. The placement decider consults it
through ``Admission`` alone.

The initial placement hands admission each trajectory it placed (``plan``: its planned worker and
the facts admission may weigh), then asks which may start (``admit``); the decider asks again
whenever room may have appeared (a trajectory ended, moved or was re-predicted, a worker
registered or was undrained or failed), and tells admission what happened to the trajectories
(``generated``, ``grew``, ``tool_returned``, ``predicted``, ``moved``, ``finished``) and to the
workers. A migration goes only where ``has_room`` says the target can hold the trajectory.

``AdmitAll`` starts every planned trajectory at once on its planned worker (the bundles without
KV admission); ``KvAdmissionGate`` (``heddle.control.placement.kv_gate``) starts one only when its
worker's projected KV has room for it; ``TrajectoryCap`` (``heddle.control.placement.cap``) starts
one while fewer than a cap run (a baseline's own concurrency control); ``ProgramGate``
(``heddle.control.placement.program_gate``) also pauses started trajectories between steps and
resumes them (ThunderAgent).

A planned trajectory without a planned worker (``None``: a router's, which routes each first
request when it starts) is admitted without one, and the placer routes it then. Admission also
hears the time of every event (``tick``), and, when a tool returns, may hold the trajectory's next
step (``holds_step``); a held step comes back from ``admit`` like a start, on the worker it resumes
on.

Trajectories are keyed ``(rollout id, trajectory id)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from heddle.events import Generated

Key = tuple[str, str]
"""``(rollout id, trajectory id)``."""


class Admitted(NamedTuple):
    """A trajectory admission lets start (or resume) now, on ``worker_id`` (None: where its
    placer routes its first request)."""

    key: Key
    worker_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionRequest:
    """A trajectory the initial placement placed, waiting to start."""

    key: Key
    planned_worker_id: str | None
    """Where the placer put it (None: a router routes it when it starts)."""
    submitted_at: float
    """When its rollout was submitted."""
    index: int
    """Its index in the rollout (submission order)."""
    context_tokens: int
    """Its context at placement (its prompt)."""
    predicted_remaining_tokens: float
    """Its first prediction (0: none)."""
    predicted_remaining_tool_s: float
    """Tool seconds its first prediction counts (0: none)."""
    group_id: str = ""
    """Its GRPO group ("": a group of its own)."""


class Admission(Protocol):
    def add_worker(self, worker_id: str, max_kv_tokens: int) -> None:
        """A worker registered (``max_kv_tokens``: its KV capacity, 0 unknown); again, for one
        relaunched at another TP degree (its capacity changes, its trajectories stay)."""
        ...

    def remove_worker(self, worker_id: str) -> None:
        """A worker failed or retired; its trajectories are ``moved`` next."""
        ...

    def plan(self, request: AdmissionRequest) -> None:
        """A placed trajectory waits to start on its planned worker."""
        ...

    def admit(self, live_workers: Iterable[str]) -> list[Admitted]:
        """The waiting trajectories that start (or whose held steps resume) now, in that order,
        each on one of ``live_workers`` or unassigned; each start and resume is admitted once."""
        ...

    def tick(self, now_s: float) -> bool:
        """An event of time ``now_s`` arrived: whether trajectories may start or resume now (a
        periodic check ran), so that the decider asks ``admit``."""
        ...

    def holds_step(self, key: Key) -> bool:
        """A started trajectory's tool returned: whether its next step waits (``admit`` returns
        it when it may run)."""
        ...

    def has_room(self, worker_id: str, key: Key) -> bool:
        """Whether the started trajectory ``key`` may move to ``worker_id``."""
        ...

    def generated(self, event: Generated) -> None:
        """A step generated ``event.output_token_ids`` (the rate of its rollout)."""
        ...

    def grew(self, key: Key, context_tokens: int) -> None:
        """The trajectory's context is now ``context_tokens``."""
        ...

    def tool_returned(self, key: Key, duration_s: float) -> None:
        """One of its tool calls took ``duration_s``."""
        ...

    def predicted(self, key: Key, remaining_tokens: float, remaining_tool_s: float) -> None:
        """A new prediction of what the trajectory still generates and waits for in tools."""
        ...

    def moved(self, key: Key, worker_id: str) -> None:
        """A started trajectory now lives on ``worker_id`` (migration or re-placement)."""
        ...

    def finished(self, key: Key) -> None:
        """The trajectory completed or failed."""
        ...

    def snapshot(self) -> object:
        """The state, as a comparable value (replay tests)."""
        ...


class IgnoresProgress:
    """The hooks of an admission that decides on plans and ends alone: a trajectory's steps,
    growth, predictions and moves change nothing, no step is held, every worker has room."""

    def tick(self, now_s: float) -> bool:
        return False

    def holds_step(self, key: Key) -> bool:
        return False

    def has_room(self, worker_id: str, key: Key) -> bool:
        return True

    def generated(self, event: Generated) -> None:
        return None

    def grew(self, key: Key, context_tokens: int) -> None:
        return None

    def tool_returned(self, key: Key, duration_s: float) -> None:
        return None

    def predicted(self, key: Key, remaining_tokens: float, remaining_tool_s: float) -> None:
        return None

    def moved(self, key: Key, worker_id: str) -> None:
        return None


class AdmitAll(IgnoresProgress):
    """Admission that starts every planned trajectory at once on its planned worker, in plan
    order; it weighs nothing and holds nothing between events."""

    def __init__(self) -> None:
        self._planned: list[Admitted] = []

    def add_worker(self, worker_id: str, max_kv_tokens: int) -> None:
        return None

    def remove_worker(self, worker_id: str) -> None:
        return None

    def plan(self, request: AdmissionRequest) -> None:
        self._planned.append(Admitted(request.key, request.planned_worker_id))

    def admit(self, live_workers: Iterable[str]) -> list[Admitted]:
        planned, self._planned = self._planned, []
        return planned

    def finished(self, key: Key) -> None:
        return None

    def snapshot(self) -> object:
        return None
