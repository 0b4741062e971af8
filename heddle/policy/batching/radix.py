"""SGLang's radix prefix cache, in token counts (the ``radix`` cache kind).

What it stands for (``python/sglang/srt/mem_cache/radix_cache.py`` in sgl-project/sglang, 0.5.x):

* The tree holds finished requests' tokens (``cache_finished_req`` inserts input + output) and,
  after a prefill, the prefilled input (``cache_unfinished_req``, "so others can match"). An
  insert adds one node for the tokens past the longest match, so a trajectory's path is a chain
  of nodes, one per insert: per turn, the prefilled new input and then the generated output.
* The samples of a GRPO group share their prompt: the prompt is one node (the tree splits there,
  where the samples diverge) with each trajectory's chain below it. Here each group's prompt node
  is keyed by ``(group_id, prompt tokens)`` and refcounted by the trajectory records below it.
* Keys are cut to whole pages (``page_align_keys``; ``match_prefix`` truncates to a page
  multiple): the unaligned tail of a context is freed, not cached.
* ``evict`` pops leaves by least-recent ``last_access_time`` (``--radix-eviction-policy lru``)
  and frees each popped leaf WHOLE (``free(x.value)``; it may free more than asked); a parent
  whose children are all gone becomes a leaf and enters the same heap. Matching or inserting a
  path touches every node on it with one timestamp, so a trajectory's chain ages together: the
  least recently used trajectory loses its last node, then the one before, ... down to the prompt
  node, which goes only once no trajectory record remains below it. A running request locks its
  path (``inc_lock_ref``); here a running job's own tokens are counted by the batch and only the
  shared prompt node stays here, locked.
* Two requests of a group admitted in one prefill batch both compute the prompt (the tree learns
  it after the batch's forward); the later ones hit it from the next batch on. SGLang's in-batch
  prefix check exists only for its cache-aware (``lpm``) policies, not for ``fcfs``.

Simplification: a trajectory's chain is only split where its own runs began and ended; a
request's matched prefix in SGLang is also split wherever another request's match ended, which
cannot happen here (only the group prompt is shared).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

NodeKey = tuple[str, int]
"""A group's prompt node: (group id, page-aligned prompt tokens)."""

_RECORD, _NODE = 0, 1


@dataclass(slots=True)
class _PromptNode:
    num_tokens: int
    num_records: int = 0
    """Trajectory records below it (it is a leaf only at 0)."""
    num_locks: int = 0
    """Running jobs that use it."""
    stamp: int = 0


@dataclass(slots=True)
class _Record:
    node: NodeKey | None
    segments: list[int] = field(default_factory=list)
    """Token counts of the trajectory's own nodes below the prompt, root first."""
    num_tokens: int = 0
    stamp: int = 0


class RadixCache:
    """Per-worker radix cache (see the module docstring); implements ``PrefixCache``."""

    def __init__(self, page_tokens: int = 1) -> None:
        if page_tokens < 1:
            raise ValueError(f"page_tokens must be >= 1, got {page_tokens}")
        self.page_tokens = page_tokens
        self.total_tokens = 0
        self.locked_tokens = 0
        self._records: dict[str, _Record] = {}
        self._nodes: dict[NodeKey, _PromptNode] = {}
        self._taken: dict[str, list[int]] = {}
        """A running trajectory's chain as it was hit (its node boundaries come back on put)."""
        self._fresh: set[NodeKey] = set()
        """Prompt nodes created in the current prefill batch (not yet matchable)."""
        self._heap: list[tuple[int, int, int, str | NodeKey]] = []
        """Leaf candidates (stamp, sequence, kind, key); valid while the stamp is current."""
        self._clock = 0

    def __len__(self) -> int:
        return len(self._records)

    # ---- queries -------------------------------------------------------------------------------

    def shared_tokens(self, group_id: str, num_prompt_tokens: int) -> int:
        return self._align(num_prompt_tokens) if group_id else 0

    def is_locked(self, group_id: str, num_prompt_tokens: int) -> bool:
        key = self._key(group_id, num_prompt_tokens)
        node = None if key is None else self._nodes.get(key)
        return key is None or (node is not None and node.num_locks > 0)

    def num_locks(self, group_id: str, num_prompt_tokens: int) -> int:
        key = self._key(group_id, num_prompt_tokens)
        node = None if key is None else self._nodes.get(key)
        return 0 if node is None else node.num_locks

    def get(self, traj_id: str) -> int:
        record = self._records.get(traj_id)
        if record is None:
            return 0
        node = None if record.node is None else self._nodes[record.node]
        return record.num_tokens + (0 if node is None else node.num_tokens)

    def match(self, traj_id: str, group_id: str, num_prompt_tokens: int) -> int:
        """The hit ``take`` would return now, without touching anything."""
        key = self._key(group_id, num_prompt_tokens)
        record = self._records.get(traj_id)
        own = 0 if record is None or record.node != key else record.num_tokens
        if key is None or key not in self._nodes or key in self._fresh:
            return own
        return own + self._nodes[key].num_tokens

    def recount(self) -> int:
        own = sum(sum(record.segments) for record in self._records.values())
        return own + sum(node.num_tokens for node in self._nodes.values())

    # ---- admission and return ------------------------------------------------------------------

    def take(self, traj_id: str, group_id: str, num_prompt_tokens: int) -> int:
        key = self._key(group_id, num_prompt_tokens)
        record = self._records.pop(traj_id, None)
        if record is not None and record.node != key:
            self._drop(record)  # cached under another prompt: no longer a prefix of this context
            record = None
        own = 0 if record is None else record.num_tokens
        self.total_tokens -= own
        self._taken[traj_id] = [] if record is None else record.segments
        if key is None:
            return own
        node = self._nodes.get(key)
        if node is None:
            node = self._nodes[key] = _PromptNode(key[1])
            self.total_tokens += node.num_tokens
            self._fresh.add(key)
        if record is not None:
            node.num_records -= 1
        if node.num_locks == 0:
            self.locked_tokens += node.num_tokens
        node.num_locks += 1
        node.stamp = self._tick()
        return own + (0 if key in self._fresh else node.num_tokens)

    def end_batch(self) -> None:
        """The prefill batch ran: the prompt nodes it created can be matched."""
        self._fresh.clear()

    def put(
        self,
        traj_id: str,
        group_id: str,
        num_prompt_tokens: int,
        num_tokens: int,
        num_split_tokens: int = 0,
    ) -> None:
        key = self._key(group_id, num_prompt_tokens)
        segments = self._taken.pop(traj_id, [])
        old = self._records.pop(traj_id, None)
        if old is not None:
            self._drop(old)
            segments = []
        stamp = self._tick()
        start = 0
        if key is not None:
            node = self._nodes.get(key)
            if node is None:
                node = self._nodes[key] = _PromptNode(key[1])
                self.total_tokens += node.num_tokens
            node.stamp = stamp
            start = node.num_tokens
        segments = _chain(segments, start, self._ends(num_split_tokens, num_tokens))
        if not segments:
            if key is not None:
                self._maybe_leaf(key)
            return
        record = _Record(key, segments, sum(segments), stamp)
        self._records[traj_id] = record
        self.total_tokens += record.num_tokens
        if key is not None:
            self._nodes[key].num_records += 1
        self._push(stamp, _RECORD, traj_id)

    def unlock(self, group_id: str, num_prompt_tokens: int) -> None:
        key = self._key(group_id, num_prompt_tokens)
        if key is None:
            return
        node = self._nodes[key]
        node.num_locks -= 1
        if node.num_locks == 0:
            self.locked_tokens -= node.num_tokens
            self._maybe_leaf(key)

    def pop(self, traj_id: str) -> int:
        self._taken.pop(traj_id, None)
        record = self._records.pop(traj_id, None)
        if record is None:
            return 0
        self._drop(record)
        return record.num_tokens

    # ---- eviction ------------------------------------------------------------------------------

    def evict_one(self) -> int:
        """Free the least recently used leaf whole: a trajectory's last node, or a prompt node
        nobody holds."""
        heap = self._heap
        while heap:
            stamp, _, kind, key = heap[0]
            if kind == _RECORD:
                assert isinstance(key, str)
                record = self._records.get(key)
                if record is None or record.stamp != stamp:
                    heapq.heappop(heap)
                    continue
                return self._evict_tail(key, record)
            assert isinstance(key, tuple)
            node = self._nodes.get(key)
            heapq.heappop(heap)
            if node is None or node.stamp != stamp or node.num_records or node.num_locks:
                continue
            del self._nodes[key]
            self.total_tokens -= node.num_tokens
            return node.num_tokens
        return 0

    def _evict_tail(self, traj_id: str, record: _Record) -> int:
        tokens = record.segments.pop()
        record.num_tokens -= tokens
        self.total_tokens -= tokens
        if not record.segments:
            heapq.heappop(self._heap)
            del self._records[traj_id]
            self._detach(record)
        return tokens

    # ---- internals -----------------------------------------------------------------------------

    def _align(self, num_tokens: int) -> int:
        return num_tokens - num_tokens % self.page_tokens

    def _key(self, group_id: str, num_prompt_tokens: int) -> NodeKey | None:
        tokens = self._align(num_prompt_tokens)
        return (group_id, tokens) if group_id and tokens > 0 else None

    def _ends(self, num_split_tokens: int, num_tokens: int) -> tuple[int, int]:
        end = self._align(num_tokens)
        return min(self._align(num_split_tokens), end), end

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _push(self, stamp: int, kind: int, key: str | NodeKey) -> None:
        heap = self._heap
        if len(heap) > 4 * (len(self._records) + len(self._nodes)) + 1024:
            self._rebuild_heap()
        heapq.heappush(heap, (stamp, self._tick(), kind, key))

    def _rebuild_heap(self) -> None:
        """Drop stale entries (put pushes one per record; eviction pops them lazily)."""
        heap: list[tuple[int, int, int, str | NodeKey]] = [
            (record.stamp, 0, _RECORD, traj_id) for traj_id, record in self._records.items()
        ]
        heap += [
            (node.stamp, 0, _NODE, key)
            for key, node in self._nodes.items()
            if not node.num_records and not node.num_locks
        ]
        heapq.heapify(heap)
        self._heap = heap

    def _drop(self, record: _Record) -> None:
        self.total_tokens -= record.num_tokens
        self._detach(record)

    def _detach(self, record: _Record) -> None:
        """A record below a prompt node is gone."""
        if record.node is not None:
            self._nodes[record.node].num_records -= 1
            self._maybe_leaf(record.node)

    def _maybe_leaf(self, key: NodeKey) -> None:
        node = self._nodes[key]
        if not node.num_records and not node.num_locks:
            self._push(node.stamp, _NODE, key)


def _chain(segments: list[int], start: int, ends: tuple[int, ...]) -> list[int]:
    """The own nodes of a chain that begins at token ``start`` (after the prompt): the hit's
    ``segments``, then one node up to each of ``ends`` past the previous end."""
    position = start + sum(segments)
    limit = max(ends)
    while segments and position > limit:  # the context shrank (a caller replaced the record)
        position -= segments.pop()
    for end in ends:
        if end > position:
            segments.append(end - position)
            position = end
    return segments
