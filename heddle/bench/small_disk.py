"""A small real file system to fill and free: a size-capped tmpfs mounted where the embedded
nats-server keeps its JetStream store (``heddle bench chaos --disk-full`` and the disk-full
tests). Writes there meet a real ENOSPC, as on a full disk; JetStream's own limits would refuse
writes with an error instead, which is not the fault being tested.

Mounting needs root (or CAP_SYS_ADMIN): ``SmallDisk.mount`` raises ``NoSmallDisk`` saying so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from heddle.errors import UserError

_CHUNK_BYTES = 1 << 20
FILLER_NAME = "heddle-filler"


class NoSmallDisk(UserError):
    """A tmpfs could not be mounted here (the message says why)."""


class SmallDisk:
    """A tmpfs of ``size_bytes`` at ``path``; ``fill()`` takes every free byte, ``free()``
    gives them back, ``unmount()`` removes it (its content goes with it)."""

    def __init__(self, path: Path, size_bytes: int) -> None:
        self.path = path
        self.size_bytes = size_bytes
        self.filler = path / FILLER_NAME

    def mount(self) -> SmallDisk:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            raise NoSmallDisk("a small tmpfs for the JetStream store needs root and mount(8)")
        self.path.mkdir(parents=True, exist_ok=True)
        options = f"size={self.size_bytes},mode=0755"
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(self.path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise NoSmallDisk(f"cannot mount a tmpfs at {self.path}: {done.stderr.strip()}")
        return self

    def unmount(self) -> None:
        with contextlib.suppress(OSError):
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)

    def free_bytes(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def fill(self) -> int:
        """Write the filler until the file system refuses (ENOSPC); the bytes it took."""
        written = 0
        chunk = b"\0" * _CHUNK_BYTES
        descriptor = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = _CHUNK_BYTES
            while size:
                try:
                    written += os.write(descriptor, chunk[:size])
                except OSError:
                    size //= 2
        finally:
            os.close(descriptor)
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)
