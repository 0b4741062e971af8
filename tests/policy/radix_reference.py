"""An obviously-correct radix tree over explicit token sequences, after SGLang's
``python/sglang/srt/mem_cache/radix_cache.py``: page-aligned keys, paged matching, node splits,
lock references, and eviction of whole least-recently-used unlocked leaves. Slow (scans the
tree); the property tests of ``heddle.policy.batching.radix`` compare against it."""

from __future__ import annotations

from dataclasses import dataclass, field

Token = tuple[str, int, int]


@dataclass(eq=False)
class Node:
    key: list[Token]
    parent: Node | None
    children: dict[tuple[Token, ...], Node] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0


class ReferenceRadixTree:
    def __init__(self, page_tokens: int) -> None:
        self.page = page_tokens
        self.root = Node([], None, lock_ref=1)
        self.clock = 0

    # ---- SGLang's primitives ---------------------------------------------------------------

    def _aligned(self, seq: list[Token]) -> list[Token]:
        return seq[: len(seq) // self.page * self.page]

    def _child_key(self, seq: list[Token]) -> tuple[Token, ...]:
        return tuple(seq[: self.page])

    def _match_len(self, key: list[Token], seq: list[Token]) -> int:
        length = 0
        while length < min(len(key), len(seq)):
            if key[length : length + self.page] != seq[length : length + self.page]:
                break
            length += self.page
        return length

    def _split(self, node: Node, length: int) -> Node:
        assert node.parent is not None
        upper = Node(node.key[:length], node.parent, lock_ref=node.lock_ref)
        upper.last_access = node.last_access
        node.parent.children[self._child_key(node.key)] = upper
        node.key = node.key[length:]
        node.parent = upper
        upper.children[self._child_key(node.key)] = node
        return upper

    def match(self, seq: list[Token], touch: bool = True) -> tuple[int, Node]:
        """Longest cached prefix (page-aligned) and the node it ends at."""
        seq = self._aligned(seq)
        if touch:
            self.clock += 1
        node, matched = self.root, 0
        while matched < len(seq):
            child = node.children.get(self._child_key(seq[matched:]))
            if child is None:
                break
            if touch:
                child.last_access = self.clock
            length = self._match_len(child.key, seq[matched:])
            if length < len(child.key):
                if touch:
                    child = self._split(child, length)
                matched += length
                node = child
                break
            matched += length
            node = child
        return matched, node

    def insert(self, seq: list[Token]) -> None:
        seq = self._aligned(seq)
        matched, node = self.match(seq)
        if matched < len(seq):
            leaf = Node(seq[matched:], node, last_access=self.clock)
            node.children[self._child_key(leaf.key)] = leaf

    def lock(self, node: Node, delta: int) -> None:
        while node is not self.root:
            node.lock_ref += delta
            assert node.parent is not None
            node = node.parent

    def evict_one(self) -> int:
        """Free the least recently used unlocked leaf whole; its tokens (0: none)."""
        leaves = [n for n in self.nodes() if not n.children and n.lock_ref == 0]
        if not leaves:
            return 0
        victim = min(leaves, key=lambda n: n.last_access)
        assert victim.parent is not None
        del victim.parent.children[self._child_key(victim.key)]
        return len(victim.key)

    def remove_chain(self, owner: int) -> None:
        """Drop a trajectory's own nodes: the subtree whose top node is the first on its path
        to hold one of the trajectory's own tokens (nobody else's path holds them)."""
        for node in self.nodes():
            parent = node.parent
            assert parent is not None
            if _owns(node, owner) and not _owns(parent, owner):
                parent.children.pop(self._child_key(node.key), None)

    # ---- views -----------------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        found, stack = [], [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node is not self.root:
                found.append(node)
        return found

    def total_tokens(self) -> int:
        return sum(len(node.key) for node in self.nodes())


def _owns(node: Node, owner: int) -> bool:
    return any(token[0] == "own" and token[1] == owner for token in node.key)
