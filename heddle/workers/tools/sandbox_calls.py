"""Sandbox calls without a pool, and the choice of isolation they rest on.

``run_once`` spawns one ``SandboxProcess`` for one request and discards it. ``resolve_isolation``
picks the level a sandbox runs at: a level is used only when a real probe call through
``run_once`` works in it and cannot reach a port listening on the host's loopback.
"""

from __future__ import annotations

import logging
import os
import socket

from heddle.workers.tools.isolation import (
    ISOLATED_LEVELS,
    Isolation,
    IsolationLevel,
    bwrap_candidate,
    namespace_candidate,
    process_isolation,
)
from heddle.workers.tools.limits import SandboxConfig
from heddle.workers.tools.sandbox import SandboxError, SandboxProcess, SandboxRequest
from heddle.workers.tools.sandbox_protocol import SandboxResult

log = logging.getLogger(__name__)


async def run_once(
    request: SandboxRequest,
    config: SandboxConfig,
    isolation: Isolation | None = None,
    uid: int | None = None,
) -> SandboxResult:
    """A cold call: spawn a process for ``request`` alone (no pool). Concurrent callers pass
    distinct ``uid``s (a ``UidAllocator``); the default is one uid per calling process."""
    isolation = isolation or await resolve_isolation(config)
    process = await SandboxProcess.spawn(isolation, config)
    if not isolation.drops_privileges:
        uid = None
    elif uid is None:
        uid = config.uid_base + os.getpid() % config.num_uids
    try:
        return await process.run(request, config.limits, uid)
    finally:
        await process.discard()


_PROBE_CODE = (
    "import socket\n"
    "sock = socket.socket()\n"
    "sock.settimeout(5)\n"
    "print('connected' if sock.connect_ex(('127.0.0.1', {port})) == 0 else 'refused')\n"
)
UNISOLATED_HINT = (
    "model code would run unisolated (process level: it can reach the network and the "
    "filesystem); fix one of these, or allow that explicitly (--allow-unisolated)"
)


async def resolve_isolation(config: SandboxConfig) -> Isolation:
    """The isolation to use. A named level is used only when a probe call shows it works
    (``SandboxError`` otherwise); ``process`` is taken as asked. ``auto`` tries namespace, then
    bwrap; when neither works it falls back to process only with ``config.allow_unisolated``
    (and logs a warning), else raises ``SandboxError`` naming why each level failed."""
    if config.isolation == "process":
        return process_isolation()
    levels = ISOLATED_LEVELS if config.isolation == "auto" else (config.isolation,)
    problems = []
    for level in levels:
        candidate, problem = _candidate(level, config)
        if candidate is not None:
            problem = await _probe(candidate, config)
            if not problem:
                return candidate
        problems.append(f"{level}: {problem}")
    if config.isolation != "auto":
        raise SandboxError(f"{config.isolation} isolation is not available here: {problem}")
    if not config.allow_unisolated:
        raise SandboxError(
            f"no sandbox isolation works here ({'; '.join(problems)}); {UNISOLATED_HINT}"
        )
    log.warning("sandbox runs UNISOLATED (process level), as allowed: %s", "; ".join(problems))
    return process_isolation()


def _candidate(level: IsolationLevel, config: SandboxConfig) -> tuple[Isolation | None, str]:
    if level == "namespace":
        return namespace_candidate(), "it needs root and util-linux 'unshare'"
    return bwrap_candidate(config.hidden_paths), "it needs bubblewrap ('bwrap' on PATH)"


async def _probe(candidate: Isolation, config: SandboxConfig) -> str:
    """'' when a real call works in ``candidate`` and cannot reach a port listening on the
    host's loopback, else why not."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        code = _PROBE_CODE.format(port=listener.getsockname()[1])
        try:
            result = await run_once(SandboxRequest(code=code), config, candidate)
        except SandboxError as exc:
            return str(exc)
    if result.status != "ok":
        return f"probe call ended {result.status}: {result.reason} {result.stderr[-300:]}"
    if result.stdout.strip() != "refused":
        return f"probe call reached the network ({result.stdout.strip()})"
    return ""
