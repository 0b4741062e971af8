"""Confining the sandbox's file system in ``namespace`` isolation, and what every isolated
level shows a call (``bwrap`` builds its mounts from the same lists).

A call sees only what it needs: the system's programs, libraries and configuration
(``SYSTEM_PATHS`` that exist here: ``/usr``, ``/etc``, the ``/lib*`` folders or their merged-usr
symlinks), the Python runtime (its prefixes and site folders, ``runtime_dirs``), a fresh
``/dev`` and ``/proc``, and private size-capped tmpfs mounts on the world-writable folders.
Everything else of the host (home folders, ``/root``, ``/srv``, ``/var``, a repository checkout
and its ``.git``) does not exist there, world-readable or not.

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
_MS_REC = 16384
WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""Shown read-only to every call (the ones that exist here; a symlink stays a symlink)."""
_STAGING_ROOT = "/tmp"
"""Where the namespace level assembles the call's root (private to its mount namespace)."""


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
    """Directories the code's interpreter reads: its prefixes and the import path entries
    inside them (the standard library, site-packages; not ``PYTHONPATH`` or a working
    directory, which the sandbox's ``python -I`` ignores), and the folder of the sandbox's own
    scripts (bwrap starts them inside the sandbox)."""
    prefixes = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    imports = {os.path.realpath(path) for path in sys.path if path}
    inside = {path for path in imports if any(is_under(path, prefix) for prefix in prefixes)}
    candidates = prefixes | inside | {os.path.dirname(os.path.abspath(__file__))}
    dirs = sorted(path for path in candidates if os.path.isdir(path))
    return [path for path in dirs if not any(path.startswith(f"{d}/") for d in dirs)]


def system_paths() -> list[str]:
    """The ``SYSTEM_PATHS`` this machine has (folders, or symlinks to them)."""
    return [path for path in SYSTEM_PATHS if os.path.lexists(path)]


def needs_binding(path: str) -> bool:
    """Whether a runtime folder lies outside the system folders a call sees anyway."""
    shown = [p for p in system_paths() if not os.path.islink(p)]
    return not any(is_under(os.path.realpath(path), root) for root in shown)


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
    """Give this process (and the call it forks) a root holding only what a call needs (see
    the module doc): a tmpfs assembled at ``_STAGING_ROOT``, the system folders and the runtime
    bound into it read-only, ``/dev`` bound, private tmpfs mounts on the writable folders; then
    ``chroot`` into it (the call runs without capabilities, so it cannot leave) and mount a
    ``/proc`` of this PID namespace. The tmpfs root is made read-only last."""
    os.umask(0o022)  # the folders made below must let the call's uid pass
    sources = [p for p in system_paths() if not os.path.islink(p)]
    sources += [path for path in runtime_dirs() if needs_binding(path)]
    # Handles opened before the staging tmpfs covers /tmp still reach what lay under it.
    handles = {path: os.open(path, os.O_PATH) for path in [*sources, "/dev"]}
    _mount("tmpfs", _STAGING_ROOT, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=0755")
    for path in system_paths():
        if os.path.islink(path):
            os.symlink(os.readlink(path), _staged(path))
    for path, handle in handles.items():
        os.makedirs(_staged(path), mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{handle}", _staged(path), None, _MS_BIND | _MS_REC, None)
        if path != "/dev":
            _mount(None, _staged(path), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
        os.close(handle)
    for path in WRITABLE_DIRS:
        os.makedirs(_staged(path), mode=0o755, exist_ok=True)
        options = f"size={scratch_bytes},mode=1777"
        _mount("tmpfs", _staged(path), "tmpfs", _MS_NOSUID | _MS_NODEV, options)
    os.makedirs(_staged("/proc"), mode=0o555, exist_ok=True)
    os.chroot(_STAGING_ROOT)
    os.chdir("/")
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    _mount(None, "/", None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV, None)


def _staged(path: str) -> str:
    return _STAGING_ROOT + path
