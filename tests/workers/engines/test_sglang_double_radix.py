"""The SGLang double's radix tree against brute force: what is cached is exactly the union of the
inserted sequences minus the evicted leaves; eviction frees the least recently used unlocked
leaf whole; a locked path is never evicted."""

from __future__ import annotations

from double_radix import RadixNode, RadixTree
from hypothesis import given, settings
from hypothesis import strategies as st

SEQUENCES = st.lists(st.integers(0, 3), min_size=1, max_size=12)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), SEQUENCES),
        st.tuples(st.just("match"), SEQUENCES),
        st.tuples(st.just("lock"), SEQUENCES),
        st.tuples(st.just("unlock"), st.integers(0, 10)),
        st.tuples(st.just("evict"), st.integers(1, 8)),
    ),
    max_size=40,
)


def paths(tree: RadixTree) -> set[tuple[int, ...]]:
    """Every cached prefix (one per cached token)."""
    found: set[tuple[int, ...]] = set()
    stack: list[tuple[RadixNode, tuple[int, ...]]] = [(tree.root, ())]
    while stack:
        node, prefix = stack.pop()
        for child in node.children.values():
            path = prefix
            for token in child.key:
                path = (*path, token)
                found.add(path)
            stack.append((child, path))
    return found


def prefixes(tokens: list[int]) -> set[tuple[int, ...]]:
    return {tuple(tokens[: end + 1]) for end in range(len(tokens))}


@settings(max_examples=150)
@given(OPS)
def test_the_tree_caches_what_was_inserted_less_whole_lru_leaves(ops: list) -> None:
    tree = RadixTree()
    cached: set[tuple[int, ...]] = set()
    locks: list[RadixNode] = []
    locked: list[set[tuple[int, ...]]] = []
    for op, arg in ops:
        if op == "insert":
            tree.insert(arg)
            cached |= prefixes(arg)
        elif op == "match":
            matched, _ = tree.match(arg)
            expected = max((len(p) for p in prefixes(arg) if p in cached), default=0)
            assert matched == expected
        elif op == "lock":
            locks.append(tree.insert(arg))
            cached |= prefixes(arg)
            tree.lock(locks[-1])
            locked.append(prefixes(arg))
        elif op == "unlock" and locks:
            index = arg % len(locks)
            tree.unlock(locks.pop(index))
            locked.pop(index)
        elif op == "evict":
            leaves = [n for n in tree.nodes() if not n.children and n.lock_ref == 0]
            oldest = min((n.last_access for n in leaves), default=None)
            freed = tree.evict(arg)
            assert freed >= min(arg, 1) or not leaves
            if leaves and oldest is not None:
                # The first victim was a least recently used unlocked leaf, freed whole.
                assert freed >= min(len(n.key) for n in leaves if n.last_access == oldest)
            cached = paths(tree)
        assert paths(tree) == cached
        assert tree.total_tokens == len(cached)
        assert all(held <= cached for held in locked)
        assert tree.locked_tokens == len(set().union(*locked)) if locked else True
        assert tree.evictable_tokens == tree.total_tokens - tree.locked_tokens


def test_a_shared_prompt_outlives_the_leaves_below_it() -> None:
    tree = RadixTree()
    prompt, own_a, own_b = [1, 2, 3, 4], [5, 6, 7], [8, 9]
    tree.insert(prompt + own_a)
    tree.insert(prompt + own_b)
    tree.match(prompt + own_b)  # b used last: a's leaf is the LRU one
    assert tree.evict(1) == len(own_a)  # a whole leaf, more than asked
    assert tree.match(prompt + own_a)[0] == len(prompt)  # a returning request hits the prompt
    assert tree.match(prompt + own_b)[0] == len(prompt + own_b)
