"""The bubblewrap (``bwrap``) command line of the ``bwrap`` isolation level.

bwrap builds the sandbox before the child script starts: new network (only a loopback of its
own), PID, IPC, UTS and cgroup namespaces, and, run by an unprivileged user, a new user
namespace (the rootless case: a Kubernetes pod without root). Filesystem: an empty root that
holds only what a call needs (``heddle.workers.tools.sandbox_mounts``: the system folders and
the Python runtime bound read-only, a fresh ``/dev`` and ``/proc``, private size-capped tmpfs
mounts on the world-writable folders), and empty tmpfs mounts (folders) or ``/dev/null``
(files) over the paths the operator hides (credentials) wherever those would show. The code
gets no capabilities; run by root, bwrap keeps only CAP_SETUID, CAP_SETGID and CAP_CHOWN in the
waiter so the runner can drop to the call's own uid (and with it every capability).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from heddle.workers.tools.sandbox_mounts import WRITABLE_DIRS, is_under, system_paths

_HIDDEN_TMPFS_BYTES = 1 << 20
_ROOT_CHILD_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN")
"""Run by root, what the waiter keeps: hand the scratch dir to the call's uid and become it
(the runner's setuid to a non-zero uid then clears every capability)."""


def bwrap_binary() -> str | None:
    return shutil.which("bwrap")


def bwrap_version(binary: str) -> str:
    """``bubblewrap 0.8.0`` or the reason none could be read."""
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return done.stdout.strip() or done.stderr.strip()


class _Root:
    """The arguments that assemble the sandbox's root, each mount point's missing parents
    made first (0755: bwrap would make them 0700, and the call's uid could not pass them)."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self._made = {"/"}
        self.shown: list[str] = []
        """Host folders bound whole: what lies under them exists in the sandbox already."""

    def parents(self, path: str) -> None:
        missing = []
        current = os.path.dirname(path)
        while current not in self._made and not any(is_under(current, s) for s in self.shown):
            missing.append(current)
            current = os.path.dirname(current)
        for parent in reversed(missing):
            self.args += ["--perms", "0755", "--dir", parent]
            self._made.add(parent)

    def add(self, path: str, *mount: str) -> None:
        self.parents(path)
        self.args += [*mount, path]
        self._made.add(path)


def bwrap_arguments(
    binary: str,
    *,
    rootless: bool,
    runtime_dirs: tuple[str, ...],
    hidden_paths: tuple[str, ...],
    scratch_bytes: int,
) -> list[str]:
    """bwrap's argv up to (not including) ``--`` and the command it runs."""
    args = [binary, "--die-with-parent", "--new-session"]
    args += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try"]
    if rootless:
        args.append("--unshare-user")
    root = _Root()
    for path in system_paths():
        if os.path.islink(path):
            root.add(path, "--symlink", os.readlink(path))
        else:
            root.add(path, "--ro-bind", path)
            root.shown.append(path)
    root.add("/dev", "--dev")
    root.add("/proc", "--proc")
    hidden_dirs = sorted(p for p in hidden_paths if os.path.isdir(p))
    # A hidden folder that holds the runtime is covered before the runtime is bound into it;
    # every other hidden path is covered last, so that no later mount shows it again.
    holding = [p for p in hidden_dirs if any(is_under(r, p) for r in runtime_dirs)]
    for path in holding:
        root.add(path, "--perms", "0755", "--size", str(_HIDDEN_TMPFS_BYTES), "--tmpfs")
    for path in WRITABLE_DIRS:
        root.add(path, "--perms", "1777", "--size", str(scratch_bytes), "--tmpfs")
    for path in sorted(runtime_dirs):
        if not any(is_under(path, system) for system in root.shown):
            root.add(path, "--ro-bind", path)
    for path in hidden_dirs:
        if path not in holding:
            root.add(path, "--perms", "0755", "--size", str(_HIDDEN_TMPFS_BYTES), "--tmpfs")
    for path in sorted(p for p in hidden_paths if os.path.isfile(p)):
        root.add(path, "--ro-bind", "/dev/null")
    args += root.args
    if not rootless:
        args += ["--cap-drop", "ALL"]
        for capability in _ROOT_CHILD_CAPABILITIES:
            args += ["--cap-add", capability]
    return args
