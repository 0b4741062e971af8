"""Running deploy/compose/compose.yaml's services as written, without Docker: each one a process
in a bubblewrap sandbox that gives it the container's view (a fresh root, the compose file's
bind mounts and named volumes at their container paths, its environment, its command), all in
one private network namespace where ``/etc/hosts`` names the NATS nodes as the compose network
would.

What differs from Docker, and why:

- each NATS node listens on its own loopback address (``-a 127.0.0.N --cluster_listen ...``):
  containers have an address each, processes in one network namespace share the ports;
- a heddle service's ``HEDDLE_DATABASE_URL`` is a SQLite file (no PostgreSQL container), and
  a worker's engine is ``sim`` (no GPU): the options after ``--engine`` are replaced;
- a service's container filesystem is the host's, read-only, plus its mounts and a writable
  ``HEDDLE_DATA_DIR``.

``python compose_run.py PLAN.json`` runs a plan (``Plan``) inside the namespace: it starts the
processes in order, waits for each one's readiness check, and prints a JSON verdict.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_VARIABLE = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")
_SHARED_DIRS = ("/etc", "/var", "/var/lib", "/run")
"""Directories rebuilt entry by entry in a sandbox, so mounts can add entries under them."""


@dataclass
class Process:
    name: str
    argv: list[str]
    env: dict[str, str]
    mounts: list[tuple[str, str]] = field(default_factory=list)
    """(host path, container path), bind mounted (read-only unless a directory)."""
    ready: str = ""
    """A line the process's log shows once it is ready ("" for no wait)."""
    expect: str = ""
    """A check rather than a service: run it (again, until the deadline) until it exits 0
    having printed this."""


@dataclass
class Plan:
    processes: list[Process]
    log_dir: str
    timeout_s: float = 120.0


def interpolate(text: str, variables: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}``."""

    def value(match: re.Match[str]) -> str:
        name, operator, default = match.group(1), match.group(2), match.group(3) or ""
        if name in variables:
            return variables[name]
        if operator == "?":
            raise KeyError(f"{name} must be set: {default}")
        return default

    return _VARIABLE.sub(value, text)


def service_mounts(
    service: dict[str, Any], variables: dict[str, str], compose_dir: Path, volumes_dir: Path
) -> list[tuple[str, str]]:
    """A service's volumes as (host path, container path): relative sources from the compose
    file's folder, named volumes as folders of ``volumes_dir``."""
    mounts = []
    for entry in service.get("volumes", []):
        source, target = interpolate(entry, variables).split(":")[:2]
        if source.startswith((".", "/")):
            path = (compose_dir / source).resolve()
        else:
            path = volumes_dir / source
            path.mkdir(parents=True, exist_ok=True)
        mounts.append((str(path), target))
    return mounts


def sandbox_args(mounts: list[tuple[str, str]]) -> list[str]:
    """bubblewrap arguments for a fresh root showing the host read-only (``/tmp`` read-write)
    and ``mounts`` at their container paths."""
    args = ["bwrap", "--die-with-parent", "--tmpfs", "/", "--proc", "/proc", "--dev", "/dev"]
    args += _tree("/", {"proc", "dev", "sys", "tmp", "lost+found"})
    args += ["--bind", "/tmp", "/tmp"]
    for source, target in mounts:
        args += ["--bind" if Path(source).is_dir() else "--ro-bind", source, target]
    return args


def _tree(folder: str, skipped: set[str]) -> list[str]:
    args: list[str] = []
    for name in sorted(os.listdir(folder)):
        if name in skipped:
            continue
        path = os.path.join(folder, name)
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif path in _SHARED_DIRS:
            args += ["--dir", path, *_tree(path, set())]
        else:
            args += ["--ro-bind", path, path]
    return args


def run_plan(plan: Plan) -> dict[str, Any]:
    """Start every process of ``plan`` (in this network namespace), each once the one before
    is ready; the verdict names the first that failed, with its log's tail."""
    log_dir = Path(plan.log_dir)
    children: list[tuple[Process, subprocess.Popen[bytes], Path]] = []
    deadline = time.monotonic() + plan.timeout_s
    try:
        for process in plan.processes:
            log_path = log_dir / f"{process.name}.log"
            argv = [*sandbox_args(process.mounts), "--", *process.argv]
            if process.expect:
                problem = _check(process, argv, log_path, deadline)
            else:
                with log_path.open("wb") as log:
                    child = subprocess.Popen(argv, env=process.env, stdout=log, stderr=log)
                children.append((process, child, log_path))
                problem = _wait_ready(process, child, log_path, deadline)
            if problem:
                return {"ok": False, "failed": process.name, "why": problem,
                        "log": log_path.read_text(errors="replace")[-3000:]}  # fmt: skip
        return {"ok": True}
    finally:
        for _, child, _ in reversed(children):
            if child.poll() is None:
                child.terminate()
        for _, child, _ in children:
            try:
                child.wait(20)
            except subprocess.TimeoutExpired:
                child.kill()


def _check(process: Process, argv: list[str], log_path: Path, deadline: float) -> str:
    while True:
        done = subprocess.run(argv, env=process.env, capture_output=True, text=True, check=False)
        log_path.write_text(done.stdout + done.stderr)
        if done.returncode == 0 and process.expect in done.stdout:
            return ""
        if time.monotonic() > deadline:
            return f"never printed {process.expect!r} (exit {done.returncode})"
        time.sleep(1.0)


def _wait_ready(
    process: Process, child: subprocess.Popen[bytes], log_path: Path, deadline: float
) -> str:
    while process.ready:
        if process.ready in log_path.read_text(errors="replace"):
            return ""
        if child.poll() is not None:
            return f"exited with {child.returncode}"
        if time.monotonic() > deadline:
            return f"not ready ({process.ready!r} not logged) in time"
        time.sleep(0.2)
    return ""


def main() -> None:
    raw = json.loads(Path(sys.argv[1]).read_text())
    processes = [
        Process(**{**p, "mounts": [tuple(m) for m in p["mounts"]]}) for p in raw.pop("processes")
    ]
    plan = Plan(processes=processes, **raw)
    print(json.dumps(run_plan(plan)))


def write_plan(plan: Plan, path: Path) -> None:
    path.write_text(json.dumps(asdict(plan)))


def network_sandbox(hosts_file: Path) -> list[str]:
    """The outer sandbox: a private network namespace whose ``/etc/hosts`` is ``hosts_file``."""
    bwrap = shutil.which("bwrap") or "bwrap"
    return [bwrap, "--die-with-parent", "--unshare-net", "--dev-bind", "/", "/",
            "--bind", str(hosts_file), "/etc/hosts"]  # fmt: skip


if __name__ == "__main__":
    main()
