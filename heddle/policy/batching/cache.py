"""Prefix caches of one worker: whose KV stays resident while its trajectory is not generating
(in a tool gap, or preempted), and what is evicted first under memory pressure.

Two kinds, one per real engine (``heddle.policy.engine_models``):

* ``trajectory`` (``LruCache``): one record per trajectory, evicted whole in least-recently-used
  order, nothing shared between trajectories; the torch engine's prefix store
  (``heddle/workers/engines/torch_engine/prefix_store.py``).
* ``radix`` (``heddle.policy.batching.radix.RadixCache``): SGLang's radix tree; a group's shared
  prompt is stored once and leaves are evicted least recently used first, so a returning
  trajectory hits whatever survives of its prefix.

Both count tokens only (no token ids). While a job runs, its own part of the context is counted
by the running batch (``RunningBatch.kv_tokens``), not here: ``take`` hands it over. Only a
shared prompt node stays here while running jobs use it (``locked_tokens``), as SGLang's
``lock_ref`` keeps a running request's matched path from being evicted.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Literal, Protocol

from heddle.policy.batching.radix import RadixCache

CacheKind = Literal["radix", "trajectory"]
CACHE_KINDS: tuple[CacheKind, ...] = ("radix", "trajectory")


class PrefixCache(Protocol):
    total_tokens: int
    """All cached KV, locked prompt nodes included."""
    locked_tokens: int
    """Tokens of shared nodes used by running jobs: counted in ``total_tokens``, not evictable."""

    def __len__(self) -> int:
        """Trajectories holding a record of their own."""
        ...

    def shared_tokens(self, group_id: str, num_prompt_tokens: int) -> int:
        """Tokens of a job's context that live in a shared node while it runs (0: none)."""
        ...

    def is_locked(self, group_id: str, num_prompt_tokens: int) -> bool:
        """Whether the group's shared node is already held by a running job."""
        ...

    def num_locks(self, group_id: str, num_prompt_tokens: int) -> int:
        """Running jobs holding the group's shared node (0: none, or no such node)."""
        ...

    def get(self, traj_id: str) -> int:
        """Tokens a returning job of this trajectory would find cached (its record and the
        shared prompt above it; 0 without a record)."""
        ...

    def take(self, traj_id: str, group_id: str, num_prompt_tokens: int) -> int:
        """Admission: the cached prefix of the trajectory's context (its hit). The trajectory's
        own record leaves the cache (the running job counts it); a shared prompt node is locked,
        and created if absent (the job prefills it now)."""
        ...

    def end_batch(self) -> None:
        """The prefill batch of the admitted jobs ran (what it computed is matchable now)."""
        ...

    def put(
        self,
        traj_id: str,
        group_id: str,
        num_prompt_tokens: int,
        num_tokens: int,
        num_split_tokens: int = 0,
    ) -> None:
        """Record (or replace) the first ``num_tokens`` of a trajectory's context, as the most
        recent. ``num_split_tokens``: where the run that produced it began (its prefilled
        context), a node boundary for the radix tree."""
        ...

    def unlock(self, group_id: str, num_prompt_tokens: int) -> None:
        """A job that ``take`` locked a shared node for stopped running."""
        ...

    def pop(self, traj_id: str) -> int:
        """Drop the trajectory's own record (a shared prompt stays, as evictable cache); its
        tokens (0 if none)."""
        ...

    def evict_one(self) -> int:
        """Evict the next victim; the tokens freed (0: nothing is evictable)."""
        ...

    def recount(self) -> int:
        """``total_tokens`` recomputed from the records (the model's invariant check)."""
        ...


class LruCache:
    """The ``trajectory`` cache: one record per trajectory, least recently used evicted whole."""

    def __init__(self) -> None:
        self._records: OrderedDict[str, int] = OrderedDict()
        self.total_tokens = 0
        self.locked_tokens = 0

    def __len__(self) -> int:
        return len(self._records)

    def shared_tokens(self, group_id: str, num_prompt_tokens: int) -> int:
        return 0

    def is_locked(self, group_id: str, num_prompt_tokens: int) -> bool:
        return True  # nothing to lock: a job adds no shared tokens

    def num_locks(self, group_id: str, num_prompt_tokens: int) -> int:
        return 0

    def get(self, traj_id: str) -> int:
        return self._records.get(traj_id, 0)

    def take(self, traj_id: str, group_id: str, num_prompt_tokens: int) -> int:
        return self.pop(traj_id)

    def end_batch(self) -> None:
        return None

    def put(
        self,
        traj_id: str,
        group_id: str,
        num_prompt_tokens: int,
        num_tokens: int,
        num_split_tokens: int = 0,
    ) -> None:
        self.pop(traj_id)
        self._records[traj_id] = num_tokens
        self.total_tokens += num_tokens

    def unlock(self, group_id: str, num_prompt_tokens: int) -> None:
        return None

    def pop(self, traj_id: str) -> int:
        tokens = self._records.pop(traj_id, 0)
        self.total_tokens -= tokens
        return tokens

    def evict_one(self) -> int:
        if not self._records:
            return 0
        _, tokens = self._records.popitem(last=False)
        self.total_tokens -= tokens
        return tokens

    def recount(self) -> int:
        return sum(self._records.values())

    def records(self) -> dict[str, int]:
        return dict(self._records)


def make_cache(kind: CacheKind, page_tokens: int = 1) -> PrefixCache:
    if kind == "trajectory":
        return LruCache()
    if kind == "radix":
        return RadixCache(page_tokens)
    raise ValueError(f"unknown prefix cache {kind!r}; choose one of {CACHE_KINDS}")
