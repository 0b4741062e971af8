"""Capped capture of a child's output: keep the first bytes, count and drop the rest.

The reader keeps draining the pipe after the cap (so the child never blocks on a full pipe and
its timeout stays the only way it ends) but memory stays bounded by the cap.
"""

from __future__ import annotations

import asyncio

_CHUNK_BYTES = 64 * 1024


class CappedBuffer:
    """The first ``max_bytes`` bytes fed to it, and how many more were dropped."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._chunks: list[bytes] = []
        self._num_kept_bytes = 0
        self.num_dropped_bytes = 0

    def feed(self, data: bytes) -> None:
        room = self.max_bytes - self._num_kept_bytes
        if room > 0:
            kept = data[:room]
            self._chunks.append(kept)
            self._num_kept_bytes += len(kept)
        self.num_dropped_bytes += max(0, len(data) - max(room, 0))

    @property
    def data(self) -> bytes:
        return b"".join(self._chunks)

    def text(self) -> str:
        """The kept bytes as UTF-8 (invalid bytes replaced), with a marker when some were
        dropped."""
        text = self.data.decode("utf-8", errors="replace")
        if self.num_dropped_bytes:
            text += f"\n[output truncated: {self.num_dropped_bytes} more bytes dropped]"
        return text


async def pump(stream: asyncio.StreamReader, buffer: CappedBuffer) -> None:
    """Feed ``stream`` into ``buffer`` until EOF; cancelling it keeps what was read."""
    while chunk := await stream.read(_CHUNK_BYTES):
        buffer.feed(chunk)
