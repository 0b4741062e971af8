"""Confining the sandbox's file system in ``namespace`` isolation, and the paths every
isolation level derives from the Python runtime (``bwrap`` builds its mounts from them).

Standard library only: the child script (``sandbox_child``) imports this module before any call,
as a sibling file when it runs as a script (``python -I``).
"""

from __future__ import annotations

import ctypes
import os
import sys

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def _c_string(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None
) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.mount(
        _c_string(source), _c_string(target), _c_string(fstype), flags, _c_string(data)
    )
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {fstype or 'bind'} on {target}: {os.strerror(errno)}")


def runtime_dirs() -> list[str]:
    """Directories the code's interpreter reads: its prefixes and import path, and the folder
    holding this package (the sandbox runs this file; an editable install under /tmp is not on
    ``sys.path``)."""
    package_root = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    )
    candidates = {sys.base_prefix, sys.prefix, *sys.path, os.path.join(package_root, "heddle")}
    dirs = sorted(path for path in candidates if path and os.path.isdir(path))
    return [path for path in dirs if not any(path.startswith(f"{d}/") for d in dirs)]


def hidden_ancestor(path: str) -> str | None:
    """The outermost directory above ``path`` that other users cannot enter (e.g. ``/root``
    holding a pyenv Python), or None."""
    current = "/"
    for part in path.strip("/").split("/")[:-1]:
        current = os.path.join(current, part)
        if not os.stat(current).st_mode & 0o001:
            return current
    return None


def is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(f"{root.rstrip('/')}/")


def confine_filesystem(scratch_bytes: int) -> None:
    """Read-only root; private tmpfs mounts over the world-writable dirs (size-capped, sticky)
    and over dirs other uids cannot enter (e.g. ``/root`` holding a pyenv Python); the Python
    runtime bound back read-only wherever such a mount covered it; a /proc of this PID
    namespace. Everything else under the covered dirs is invisible to the code."""
    runtime = runtime_dirs()
    hidden = sorted({above for path in runtime if (above := hidden_ancestor(path))})
    writable = [path for path in WRITABLE_DIRS if os.path.isdir(path)]
    covered = [path for path in runtime if any(is_under(path, root) for root in hidden + writable)]
    # Handles opened before the covering mounts still reach the original directories.
    handles = {path: os.open(path, os.O_PATH) for path in covered}
    _mount(None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
    for path in hidden:
        _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=0755")
    for path in writable:
        options = f"size={scratch_bytes},mode=1777"
        _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, options)
    for path, handle in handles.items():
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{handle}", path, None, _MS_BIND, None)
        _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
        os.close(handle)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
