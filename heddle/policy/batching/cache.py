"""Prefix-cache records of one worker: which trajectories' KV stays resident while they are not
generating (in a tool gap, or preempted), and which is evicted first under memory pressure.

* ``lru``: least recently used first, as SGLang's radix cache (and vLLM's prefix cache) do.
  Under KV pressure this evicts the trajectories that went into a tool call earliest, the very
  ones about to come back.
* ``priority``: lowest priority first (then least recently used), and a job is admitted only if
  it fits without evicting the prefix of a trajectory whose priority is at least its own. This
  extends PPS's rule that a preempted request keeps its prefix cache (paper s.4.2) to memory
  pressure: the long trajectories PPS runs first keep their KV through their tool gaps, while
  short ones use the room that is left. A job whose trajectory holds no prefix here (new, or
  evicted) evicts nobody: residents keep their place against newcomers, or every arrival would
  push out a resident that comes back and pushes out the next (re-prefilling whole contexts).
  The engine lifts that for a job that has waited too long (``evicts_as_resident``), so an
  evicted trajectory is not starved until the residents drain.
"""

from __future__ import annotations

import bisect
import itertools
from collections import OrderedDict
from typing import Literal, Protocol

EvictionPolicy = Literal["lru", "priority"]


class PrefixCache(Protocol):
    @property
    def total_tokens(self) -> int: ...

    def __len__(self) -> int: ...

    def get(self, traj_id: str) -> int: ...

    def put(self, traj_id: str, num_tokens: int, priority: float) -> None:
        """Record (or replace) a trajectory's resident prefix; it becomes the most recent."""
        ...

    def pop(self, traj_id: str) -> int:
        """Remove a trajectory's record; its tokens (0 if none)."""
        ...

    def reprioritize(self, traj_id: str, priority: float) -> None:
        """The trajectory's priority changed (a record protects by its current priority)."""
        ...

    def evict_one(self) -> int:
        """Evict the next victim; its tokens (the cache must not be empty)."""
        ...

    def protected_tokens(
        self, priority: float, traj_id: str, evicts_as_resident: bool = False
    ) -> int:
        """Tokens a job of ``priority`` may not evict (not counting ``traj_id``'s own record);
        ``evicts_as_resident``: a job without a prefix here evicts by priority too."""
        ...

    def records(self) -> dict[str, int]: ...


class LruCache:
    def __init__(self) -> None:
        self._records: OrderedDict[str, int] = OrderedDict()
        self.total_tokens = 0

    def __len__(self) -> int:
        return len(self._records)

    def get(self, traj_id: str) -> int:
        return self._records.get(traj_id, 0)

    def put(self, traj_id: str, num_tokens: int, priority: float) -> None:
        self.pop(traj_id)
        self._records[traj_id] = num_tokens
        self.total_tokens += num_tokens

    def pop(self, traj_id: str) -> int:
        tokens = self._records.pop(traj_id, 0)
        self.total_tokens -= tokens
        return tokens

    def reprioritize(self, traj_id: str, priority: float) -> None:
        return None

    def evict_one(self) -> int:
        _, tokens = self._records.popitem(last=False)
        self.total_tokens -= tokens
        return tokens

    def protected_tokens(
        self, priority: float, traj_id: str, evicts_as_resident: bool = False
    ) -> int:
        return 0

    def records(self) -> dict[str, int]:
        return dict(self._records)


class PriorityCache:
    """Records sorted by (priority, recency); prefix sums are rebuilt lazily (C-speed
    ``accumulate``) when a query follows a change."""

    def __init__(self) -> None:
        self._keys: list[tuple[float, int, str]] = []
        self._tokens: list[int] = []
        self._key_of: dict[str, tuple[float, int, str]] = {}
        self._sequence = itertools.count()
        self._prefix: list[int] | None = None
        self.total_tokens = 0

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, traj_id: str) -> int:
        key = self._key_of.get(traj_id)
        return 0 if key is None else self._tokens[bisect.bisect_left(self._keys, key)]

    def put(self, traj_id: str, num_tokens: int, priority: float) -> None:
        self.pop(traj_id)
        key = (priority, next(self._sequence), traj_id)
        index = bisect.bisect_left(self._keys, key)
        self._keys.insert(index, key)
        self._tokens.insert(index, num_tokens)
        self._key_of[traj_id] = key
        self.total_tokens += num_tokens
        self._prefix = None

    def pop(self, traj_id: str) -> int:
        key = self._key_of.pop(traj_id, None)
        if key is None:
            return 0
        index = bisect.bisect_left(self._keys, key)
        del self._keys[index]
        tokens = self._tokens.pop(index)
        self.total_tokens -= tokens
        self._prefix = None
        return tokens

    def reprioritize(self, traj_id: str, priority: float) -> None:
        key = self._key_of.get(traj_id)
        if key is not None and key[0] != priority:
            self.put(traj_id, self.pop(traj_id), priority)

    def evict_one(self) -> int:
        key = self._keys.pop(0)
        del self._key_of[key[2]]
        tokens = self._tokens.pop(0)
        self.total_tokens -= tokens
        self._prefix = None
        return tokens

    def protected_tokens(
        self, priority: float, traj_id: str, evicts_as_resident: bool = False
    ) -> int:
        if self._prefix is None:
            self._prefix = list(itertools.accumulate(self._tokens, initial=0))
        own = self._key_of.get(traj_id)
        if own is None and not evicts_as_resident:
            return self.total_tokens  # a trajectory without a resident prefix evicts nobody
        below = bisect.bisect_left(self._keys, (priority, -1, ""))
        protected = self.total_tokens - self._prefix[below]
        if own is not None and own[0] >= priority:
            protected -= self.get(traj_id)
        return protected

    def records(self) -> dict[str, int]:
        return {key[2]: tokens for key, tokens in zip(self._keys, self._tokens, strict=True)}


def make_cache(policy: EvictionPolicy) -> PrefixCache:
    if policy == "lru":
        return LruCache()
    if policy == "priority":
        return PriorityCache()
    raise ValueError(f"unknown eviction policy {policy!r}; choose lru or priority")
