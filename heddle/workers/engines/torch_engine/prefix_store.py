"""Cached prefixes of idle trajectories (between turns), least recently used first. No torch here.

An entry is the KV of a trajectory's context so far. When the trajectory's next request arrives
the engine ``take``s the entry (the longest common prefix with the new context is re-used) and
the request owns it; when the request ends, its KV comes back with ``put``. Entries are evicted
in LRU order when the engine needs room; the store remembers what it evicted (length and hash of
the tokens, for the most recent ``MAX_LOST_ENTRIES`` trajectories) so that prefilling those tokens
again counts as recomputation.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

Payload = TypeVar("Payload")

MAX_LOST_ENTRIES = 65536


@dataclass(frozen=True, slots=True)
class CacheEntry(Generic[Payload]):
    token_ids: tuple[int, ...]
    payload: Payload
    """The KV itself (a ``KVBlock`` in the engine; anything in tests)."""

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def common_prefix_len(left: tuple[int, ...] | list[int], right: tuple[int, ...] | list[int]) -> int:
    limit = min(len(left), len(right))
    for index in range(limit):
        if left[index] != right[index]:
            return index
    return limit


class PrefixStore(Generic[Payload]):
    def __init__(self) -> None:
        self._entries: OrderedDict[str, CacheEntry[Payload]] = OrderedDict()
        self._lost: OrderedDict[str, tuple[int, int]] = OrderedDict()
        """Evicted trajectory -> (number of tokens, hash of those tokens)."""
        self.num_tokens = 0
        """KV tokens held by all entries."""
        self.num_evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, trajectory_id: str) -> bool:
        return trajectory_id in self._entries

    def get(self, trajectory_id: str) -> CacheEntry[Payload] | None:
        return self._entries.get(trajectory_id)

    def put(self, trajectory_id: str, entry: CacheEntry[Payload]) -> None:
        """Store (or replace) the trajectory's entry as the most recently used."""
        self.drop(trajectory_id)
        self._entries[trajectory_id] = entry
        self.num_tokens += entry.num_tokens
        self._lost.pop(trajectory_id, None)

    def take(self, trajectory_id: str) -> CacheEntry[Payload] | None:
        """Remove and return the trajectory's entry (its request now owns the KV)."""
        entry = self._entries.pop(trajectory_id, None)
        if entry is not None:
            self.num_tokens -= entry.num_tokens
        return entry

    def drop(self, trajectory_id: str) -> None:
        """Forget the trajectory entirely (``release``)."""
        self.take(trajectory_id)
        self._lost.pop(trajectory_id, None)

    def evict_lru(self, num_tokens: int) -> int:
        """Evict least recently used entries until ``num_tokens`` are freed or none is left.

        Returns the number of tokens freed (may be less than asked).
        """
        freed = 0
        while freed < num_tokens and self._entries:
            trajectory_id, entry = self._entries.popitem(last=False)
            self.num_tokens -= entry.num_tokens
            self._remember_lost(trajectory_id, entry.token_ids)
            self.num_evictions += 1
            freed += entry.num_tokens
        return freed

    def num_lost_tokens(self, trajectory_id: str, context: list[int]) -> int:
        """How much of ``context`` this store held for the trajectory before evicting it."""
        lost = self._lost.get(trajectory_id)
        if lost is None:
            return 0
        num_tokens, tokens_hash = lost
        return num_tokens if hash(tuple(context[:num_tokens])) == tokens_hash else 0

    def _remember_lost(self, trajectory_id: str, token_ids: tuple[int, ...]) -> None:
        self._lost[trajectory_id] = (len(token_ids), hash(token_ids))
        self._lost.move_to_end(trajectory_id)
        while len(self._lost) > MAX_LOST_ENTRIES:
            self._lost.popitem(last=False)
