"""Fixtures of the tool-executor tests: the isolation levels this machine offers.

A level this machine does not offer skips its tests, unless ``HEDDLE_REQUIRE_ISOLATION`` names
it (comma-separated, e.g. ``bwrap``; .ci/run sets it to the level the manifests under deploy/
run executors at): then its tests fail, so CI never passes with the attack tests silently off.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from heddle.workers.tools.isolation import Isolation, process_isolation
from heddle.workers.tools.limits import SandboxConfig
from heddle.workers.tools.sandbox import SandboxError
from heddle.workers.tools.sandbox_calls import resolve_isolation

REQUIRED_ISOLATION = {
    level.strip() for level in os.environ.get("HEDDLE_REQUIRE_ISOLATION", "").split(",") if level
}


def unavailable(level: str, reason: str) -> None:
    """Skip (or fail, when ``HEDDLE_REQUIRE_ISOLATION`` names ``level``) a test of ``level``."""
    message = f"{level} isolation unavailable: {reason}"
    if level in REQUIRED_ISOLATION:
        pytest.fail(f"{message} (HEDDLE_REQUIRE_ISOLATION={','.join(sorted(REQUIRED_ISOLATION))})")
    pytest.skip(message)


def _confirmed(level: str) -> Isolation:
    try:
        return asyncio.run(resolve_isolation(SandboxConfig(isolation=level)))  # type: ignore[arg-type]
    except SandboxError as exc:
        unavailable(level, str(exc))
        raise  # unreachable: skip and fail raise


@pytest.fixture(scope="session")
def isolation_unavailable() -> object:
    """``unavailable`` for test modules (conftest itself cannot be imported from them)."""
    return unavailable


@pytest.fixture(scope="session")
def namespace_isolation() -> Isolation:
    """Namespace isolation, confirmed by a probe call."""
    return _confirmed("namespace")


@pytest.fixture(scope="session")
def bwrap_isolation() -> Isolation:
    """bubblewrap isolation as this user (root here: per-call uids), confirmed by a probe."""
    return _confirmed("bwrap")


@pytest.fixture(params=["namespace", "bwrap"])
def confined_isolation(request: pytest.FixtureRequest) -> Isolation:
    """Each isolated level this machine offers (the attack tests run at each)."""
    isolation: Isolation = request.getfixturevalue(f"{request.param}_isolation")
    return isolation


@pytest.fixture(params=["namespace", "bwrap", "process"])
def any_isolation(request: pytest.FixtureRequest) -> Isolation:
    """Each isolation level this machine offers."""
    if request.param == "process":
        return process_isolation()
    isolation: Isolation = request.getfixturevalue(f"{request.param}_isolation")
    return isolation
