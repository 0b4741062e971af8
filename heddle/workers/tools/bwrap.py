"""The bubblewrap (``bwrap``) command line of the ``bwrap`` isolation level.

bwrap builds the sandbox before the child script starts: new network (only a loopback of its
own), PID, IPC, UTS and cgroup namespaces, and, run by an unprivileged user, a new user
namespace (the rootless case: a Kubernetes pod without root). Filesystem: ``/`` bound
read-only, a fresh ``/dev`` and ``/proc``, private size-capped tmpfs mounts over the
world-writable directories, empty tmpfs mounts over directories other uids cannot enter and
over the paths the operator hides (credentials), and the Python runtime bound back read-only
wherever one of those mounts covered it. The code gets no capabilities; run by root, bwrap
keeps only CAP_SETUID, CAP_SETGID and CAP_CHOWN in the waiter so the runner can drop to the
call's own uid (and with it every capability).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from heddle.workers.tools.sandbox_mounts import WRITABLE_DIRS, hidden_ancestor, is_under

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


def _parents_below(path: str, root: str) -> list[str]:
    """The directories strictly between ``root`` and ``path``, outermost first."""
    parents = []
    current = os.path.dirname(path)
    while current != root and is_under(current, root):
        parents.append(current)
        current = os.path.dirname(current)
    return parents[::-1]


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
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    unreachable = {above for path in runtime_dirs if (above := hidden_ancestor(path))}
    hidden_dirs = {p for p in hidden_paths if os.path.isdir(p)}
    # A hidden folder that holds the runtime is covered before the runtime is bound back into
    # it; every other hidden path is covered last, so that no later mount (a scratch tmpfs, the
    # runtime bound back from under /tmp) shows it again.
    holding = {p for p in hidden_dirs if any(is_under(r, p) for r in runtime_dirs)}
    covers = sorted(unreachable | holding)
    for path in covers:
        args += ["--perms", "0755", "--size", str(_HIDDEN_TMPFS_BYTES), "--tmpfs", path]
    writable = [path for path in WRITABLE_DIRS if os.path.isdir(path)]
    for path in writable:
        args += ["--perms", "1777", "--size", str(scratch_bytes), "--tmpfs", path]
    args += _runtime_binds(runtime_dirs, covers + writable)
    visible = [p for p in hidden_paths if p not in holding]
    for path in sorted(p for p in visible if os.path.isdir(p)):
        args += ["--perms", "0755", "--size", str(_HIDDEN_TMPFS_BYTES), "--tmpfs", path]
    for path in sorted(p for p in visible if os.path.isfile(p)):
        args += ["--ro-bind", "/dev/null", path]
    if not rootless:
        args += ["--cap-drop", "ALL"]
        for capability in _ROOT_CHILD_CAPABILITIES:
            args += ["--cap-add", capability]
    return args


def _runtime_binds(runtime_dirs: tuple[str, ...], roots: list[str]) -> list[str]:
    """The runtime folders bound back read-only where a tmpfs of ``roots`` covers them."""
    args: list[str] = []
    for path in runtime_dirs:
        root = next((root for root in roots if is_under(path, root)), None)
        if root is not None:
            # bwrap would make the missing parents 0700: the call's uid could not pass them.
            for parent in _parents_below(path, root):
                args += ["--perms", "0755", "--dir", parent]
            args += ["--ro-bind", path, path]
    return args
