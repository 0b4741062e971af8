"""What a baseline router sees of a generation request, and what every router answers.

A router is asked, at every step of every trajectory, which worker serves that step's request.
Some routers need only an identity (sticky maps, hash rings); the SGLang router's
``cache_aware`` policy needs the request's text. Heddle does not ship text to its routers; it
models it (``RouteRequest``): a request's text is the rollout's common prefix (chat template and
system prompt), then the rest of the group's shared prompt, then the trajectory's own turns. A
trajectory's next request extends its previous one (multi-turn agents resend the whole
conversation), and distinct trajectories diverge right after the group prompt (their samples
differ), distinct groups right after the common prefix. Lengths are in tokens; the router counts
characters, and a constant number of characters per token cancels out of its match *ratio*.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """One generation request, as the routers see it (its text in the model above)."""

    traj_id: str
    """The trajectory (slime's ``sample.session_id``: the consistent-hash routing key)."""
    group_id: str = ""
    """The GRPO group whose members share the prompt ("": a group of its own)."""
    num_prompt_tokens: int = 0
    """The group's shared prompt, common prefix included."""
    num_context_tokens: int = 0
    """The whole request: the prompt, then the trajectory's turns so far (>= the prompt)."""
    num_common_prefix_tokens: int = 0
    """The prefix every request of the rollout shares (chat template, system prompt)."""

    def __post_init__(self) -> None:
        if not 0 <= self.num_common_prefix_tokens <= self.num_prompt_tokens:
            raise ValueError(
                f"need 0 <= common prefix ({self.num_common_prefix_tokens}) <= prompt "
                f"({self.num_prompt_tokens}) tokens"
            )

    @property
    def group_key(self) -> str:
        """The group this request's prompt belongs to (its trajectory when none was given)."""
        return self.group_id or f"traj:{self.traj_id}"

    @property
    def num_text_tokens(self) -> int:
        """The request's text length: its context, never shorter than its prompt."""
        return max(self.num_context_tokens, self.num_prompt_tokens)


class Router(Protocol):
    @property
    def name(self) -> str: ...

    def route(self, request: RouteRequest, loads: Sequence[float]) -> int:
        """The worker index for this step's request. ``loads[i]``: worker ``i``'s in-flight
        requests; ``inf`` marks a worker that is down (no router may pick it)."""
        ...

    def release(self, traj_id: str) -> None:
        """The trajectory finished: forget it (per-trajectory state would otherwise grow)."""
        ...


def check_loads(loads: Sequence[float], num_workers: int) -> None:
    if len(loads) != num_workers:
        raise ValueError(f"loads has {len(loads)} entries for {num_workers} workers")


def check_worker_names(worker_names: Sequence[str]) -> None:
    if len(worker_names) < 1:
        raise ValueError(f"num_workers must be >= 1, got {len(worker_names)}")
    if len(set(worker_names)) != len(worker_names):
        raise ValueError(f"worker names must be distinct, got {list(worker_names)}")


def live_indices(loads: Sequence[float]) -> list[int]:
    """Indices of the workers that are up (finite load), in index order."""
    return [i for i, load in enumerate(loads) if load != float("inf")]


def first_least_loaded(loads: Sequence[float]) -> int:
    """The least-loaded worker, the first one on ties (Rust's ``min_by_key`` and Python's
    ``min`` both keep the first minimum)."""
    return min(range(len(loads)), key=loads.__getitem__)
