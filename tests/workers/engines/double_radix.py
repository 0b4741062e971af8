"""The SGLang double's radix cache over token ids (page size 1), after SGLang 0.5.x
``python/sglang/srt/mem_cache/radix_cache.py``: ``match_prefix`` (touches the matched path and
splits a node where the match ends inside it), ``insert`` (one new leaf for the tokens past the
longest match), ``inc_lock_ref`` / ``dec_lock_ref`` (a running request pins its path) and
``evict`` with ``--radix-eviction-policy lru``: pop the least recently used unlocked leaf, free
it WHOLE (it may free more than asked), and let a parent whose children are all gone become a
leaf in turn.

``heddle.policy.batching.radix`` models the same cache in token counts keyed by trajectory (what
the simulator knows); the double sees real token ids, so it keeps a real tree. Scans for the
eviction victim are linear: the double's trees are small.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class RadixNode:
    key: list[int]
    parent: RadixNode | None
    children: dict[int, RadixNode] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0


class RadixTree:
    """Token radix tree with lock references and whole-leaf LRU eviction."""

    def __init__(self) -> None:
        self.root = RadixNode([], None, lock_ref=1)
        self.total_tokens = 0
        self.locked_tokens = 0
        self._clock = 0

    @property
    def evictable_tokens(self) -> int:
        return self.total_tokens - self.locked_tokens

    def match(self, tokens: list[int]) -> tuple[int, RadixNode]:
        """The longest cached prefix of ``tokens`` and the node it ends at; touches the path."""
        self._clock += 1
        node, matched = self.root, 0
        while matched < len(tokens):
            child = node.children.get(tokens[matched])
            if child is None:
                break
            child.last_access = self._clock
            length = _common(child.key, tokens, matched)
            matched += length
            if length < len(child.key):
                return matched, self._split(child, length)
            node = child
        return matched, node

    def insert(self, tokens: list[int]) -> RadixNode:
        """Cache ``tokens`` (a leaf for what is not cached yet); the node at their end."""
        matched, node = self.match(tokens)
        if matched < len(tokens):
            leaf = RadixNode(tokens[matched:], node, last_access=self._clock)
            node.children[leaf.key[0]] = leaf
            self.total_tokens += len(leaf.key)
            node = leaf
        return node

    def lock(self, node: RadixNode) -> None:
        """Pin the path from ``node`` to the root (a running request's context)."""
        while node is not self.root:
            if node.lock_ref == 0:
                self.locked_tokens += len(node.key)
            node.lock_ref += 1
            assert node.parent is not None
            node = node.parent

    def unlock(self, node: RadixNode) -> None:
        while node is not self.root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.locked_tokens -= len(node.key)
            assert node.parent is not None
            node = node.parent

    def evict(self, num_tokens: int) -> int:
        """Free unlocked leaves, least recently used first, until ``num_tokens`` are freed or
        none is left; the tokens freed (whole leaves: possibly more than asked)."""
        freed = 0
        while freed < num_tokens:
            victim = self._lru_leaf()
            if victim is None:
                break
            assert victim.parent is not None
            del victim.parent.children[victim.key[0]]
            self.total_tokens -= len(victim.key)
            freed += len(victim.key)
        return freed

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def nodes(self) -> list[RadixNode]:
        found, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            found.append(node)
            stack.extend(node.children.values())
        return found

    def _lru_leaf(self) -> RadixNode | None:
        leaves = [node for node in self.nodes() if not node.children and node.lock_ref == 0]
        return min(leaves, key=lambda node: node.last_access, default=None)

    def _split(self, node: RadixNode, length: int) -> RadixNode:
        """Cut ``node`` after ``length`` tokens; the upper part (returned) takes its place with
        its lock count, so the number of locked tokens does not change."""
        parent = node.parent
        assert parent is not None
        upper = RadixNode(node.key[:length], parent, lock_ref=node.lock_ref)
        upper.last_access = node.last_access
        parent.children[upper.key[0]] = upper
        node.key = node.key[length:]
        node.parent = upper
        upper.children[node.key[0]] = node
        return upper


def _common(key: list[int], tokens: list[int], start: int) -> int:
    length = 0
    limit = min(len(key), len(tokens) - start)
    while length < limit and key[length] == tokens[start + length]:
        length += 1
    return length
