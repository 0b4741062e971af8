"""The placer interface: the per-rollout strategy that says where trajectories start, where each
step runs and when a trajectory should move (``PresortedPlacer``, ``RouterPlacer``).

A placer is built per rollout, once its trajectories and workers are known, and is owned by the
placement decider, which tells it what happened to the trajectories it placed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from heddle.policy.migration.planner import MigrationRequest


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    worker_id: str
    tp_degree: int = 1


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    traj_id: str
    predicted_remaining_tokens: float = 0.0
    prompt_tokens: int = 0
    predicted_remaining_tool_s: float = 0.0
    group_id: str = ""
    """The GRPO group (members share the prompt); "": a group of its own."""


@dataclass(frozen=True, slots=True)
class Assignment:
    traj_id: str
    worker_id: str
    rank: int
    """Rank in the presorted order (0 = predicted longest); submission order for routers."""


class Placer(Protocol):
    @property
    def needs_predictions(self) -> bool:
        """Whether the initial placement waits for every trajectory's first prediction."""
        ...

    def place(
        self, trajectories: Sequence[PlacementRequest], workers: Sequence[WorkerInfo]
    ) -> list[Assignment]:
        """Initial placement of a rollout's trajectories (given in submission order): the
        trajectories it assigns now; one it leaves out is routed when it starts
        (``route_first``)."""
        ...

    def route_first(self, traj_id: str, loads: Mapping[str, int]) -> str:
        """The worker of the first step of a trajectory ``place`` left unassigned, now that
        admission starts it (``loads``: the live workers' in-flight requests)."""
        ...

    def route(
        self, traj_id: str, current_worker_id: str, context_tokens: int, loads: Mapping[str, int]
    ) -> str:
        """The worker for the trajectory's next step (``loads``: live workers' in-flight)."""
        ...

    def on_prediction(
        self,
        traj_id: str,
        predicted: float,
        *,
        remaining_tokens: float = 0.0,
        context_tokens: int = 0,
        kv_is_stale: bool = False,
        pauses: Mapping[str, float] | None = None,
    ) -> MigrationRequest | None:
        """A new predicted length (output tokens plus ``token_equivalents`` of tool time), with
        the predicted remaining output and the context now (what a move would cost);
        ``kv_is_stale``: a weight swap drops the trajectory's KV before its next step, so it
        re-prefills wherever it runs; ``pauses``: per worker that must swap weights first, the
        seconds its load pauses it (None: none)."""
        ...

    def token_equivalents(self, tool_s: float) -> float:
        """Tool seconds as the output tokens a length counts them for (0: tokens only)."""
        ...

    def on_moved(self, traj_id: str, worker_id: str) -> None:
        """The trajectory now lives on ``worker_id`` (started there, migrated or re-placed)."""
        ...

    def on_finished(self, traj_id: str) -> None: ...

    def on_worker_failed(self, worker_id: str) -> None:
        """The worker is gone (failed, or retired for a re-shard): no move targets it."""
        ...

    def on_worker_resized(self, worker_id: str, tp_degree: int) -> None:
        """The worker relaunched at another TP degree (a re-shard merged others into it)."""
        ...

    def snapshot(self) -> object:
        """The placer's state, as a comparable value (replay tests)."""
        ...
