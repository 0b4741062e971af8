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
worker's projected KV has room for it.

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
    """A trajectory admission lets start now, on ``worker_id``."""

    key: Key
    worker_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionRequest:
    """A trajectory the initial placement placed, waiting to start."""

    key: Key
    planned_worker_id: str
    """Where the placer put it."""
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
        """The waiting trajectories that start now, in the order they start, each on one of
        ``live_workers``; each is admitted once."""
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


class AdmitAll:
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

    def finished(self, key: Key) -> None:
        return None

    def snapshot(self) -> object:
        return None
