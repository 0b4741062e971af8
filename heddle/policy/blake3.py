"""BLAKE3 (the hash the SGLang gateway's consistent-hash ring uses), in pure Python.

The gateway places workers and routing keys on its ring with ``blake3::hash`` and takes the
first 8 bytes little-endian (``smg`` ``src/core/worker_registry.rs``, ``HashRing::hash_position``).
Modelling that ring exactly needs the same hash; the standard library has none, and a compiled
dependency for a few hundred short keys per rollout is not worth it. This follows the BLAKE3
specification (O'Connor et al., 2020, s.2: the compression function, 1024-byte chunks of
64-byte blocks, a binary tree of parent nodes); it hashes ring keys (tens of bytes), so speed is
not a concern. Only the default (unkeyed) 32-byte digest is provided.
"""

from __future__ import annotations

_IV = (
    0x6A09E667,
    0xBB67AE85,
    0x3C6EF372,
    0xA54FF53A,
    0x510E527F,
    0x9B05688C,
    0x1F83D9AB,
    0x5BE0CD19,
)
_PERMUTATION = (2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8)
_CHUNK_START, _CHUNK_END, _PARENT, _ROOT = 1, 2, 4, 8
_BLOCK_LEN, _CHUNK_LEN = 64, 1024
_MASK = 0xFFFFFFFF
# The column then diagonal quarter-rounds of one round: (a, b, c, d) state indices.
_QUARTER_ROUNDS = (
    (0, 4, 8, 12),
    (1, 5, 9, 13),
    (2, 6, 10, 14),
    (3, 7, 11, 15),
    (0, 5, 10, 15),
    (1, 6, 11, 12),
    (2, 7, 8, 13),
    (3, 4, 9, 14),
)


def _rotr(x: int, n: int) -> int:
    return ((x >> n) | (x << (32 - n))) & _MASK


def _round(s: list[int], m: list[int]) -> None:
    for i, (a, b, c, d) in enumerate(_QUARTER_ROUNDS):
        s[a] = (s[a] + s[b] + m[2 * i]) & _MASK
        s[d] = _rotr(s[d] ^ s[a], 16)
        s[c] = (s[c] + s[d]) & _MASK
        s[b] = _rotr(s[b] ^ s[c], 12)
        s[a] = (s[a] + s[b] + m[2 * i + 1]) & _MASK
        s[d] = _rotr(s[d] ^ s[a], 8)
        s[c] = (s[c] + s[d]) & _MASK
        s[b] = _rotr(s[b] ^ s[c], 7)


def _compress(cv: tuple[int, ...], block: bytes, counter: int, flags: int) -> list[int]:
    """The compression function on one block (zero-padded to 64 bytes): all 16 output words."""
    words = [int.from_bytes(block[i : i + 4].ljust(4, b"\0"), "little") for i in range(0, 64, 4)]
    state = [*cv, *_IV[:4], counter & _MASK, (counter >> 32) & _MASK, len(block), flags]
    for round_index in range(7):
        _round(state, words)
        if round_index < 6:
            words = [words[i] for i in _PERMUTATION]
    return [state[i] ^ state[i + 8] for i in range(8)] + [state[i + 8] ^ cv[i] for i in range(8)]


class _Output:
    """A node's last compression, kept so the root can be finalised with the ROOT flag."""

    def __init__(self, cv: tuple[int, ...], block: bytes, counter: int, flags: int) -> None:
        self._args = (cv, block, counter, flags)

    def chaining_value(self) -> tuple[int, ...]:
        return tuple(_compress(*self._args)[:8])

    def root_digest(self) -> bytes:
        cv, block, counter, flags = self._args
        words = _compress(cv, block, counter, flags | _ROOT)
        return b"".join(word.to_bytes(4, "little") for word in words[:8])


def _chunk_output(chunk: bytes, chunk_index: int) -> _Output:
    cv: tuple[int, ...] = _IV
    blocks = [chunk[i : i + _BLOCK_LEN] for i in range(0, len(chunk), _BLOCK_LEN)] or [b""]
    for i, block in enumerate(blocks[:-1]):
        flags = _CHUNK_START if i == 0 else 0
        cv = tuple(_compress(cv, block, chunk_index, flags)[:8])
    last_flags = _CHUNK_END | (_CHUNK_START if len(blocks) == 1 else 0)
    return _Output(cv, blocks[-1], chunk_index, last_flags)


def _parent_output(left: tuple[int, ...], right: tuple[int, ...]) -> _Output:
    block = b"".join(word.to_bytes(4, "little") for word in (*left, *right))
    return _Output(_IV, block, 0, _PARENT)


def blake3_digest(data: bytes) -> bytes:
    """The 32-byte BLAKE3 hash of ``data`` (what ``blake3::hash(data).as_bytes()`` returns)."""
    chunks = [data[i : i + _CHUNK_LEN] for i in range(0, len(data), _CHUNK_LEN)] or [b""]
    stack: list[tuple[int, ...]] = []
    for index, chunk in enumerate(chunks[:-1]):
        cv = _chunk_output(chunk, index).chaining_value()
        done = index + 1
        # Merge completed subtrees: one merge per trailing zero bit of the chunk count.
        while done & 1 == 0:
            cv = _parent_output(stack.pop(), cv).chaining_value()
            done >>= 1
        stack.append(cv)
    output = _chunk_output(chunks[-1], len(chunks) - 1)
    while stack:
        output = _parent_output(stack.pop(), output.chaining_value())
    return output.root_digest()


def blake3_u64_le(text: str) -> int:
    """The first 8 bytes of the BLAKE3 hash of ``text`` (UTF-8) as a little-endian integer."""
    return int.from_bytes(blake3_digest(text.encode())[:8], "little")
