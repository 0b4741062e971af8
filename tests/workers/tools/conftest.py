"""Fixtures of the tool-executor tests: the isolation levels this machine offers."""

from __future__ import annotations

import asyncio

import pytest

from heddle.workers.tools.isolation import Isolation, process_isolation
from heddle.workers.tools.limits import SandboxConfig
from heddle.workers.tools.sandbox import SandboxError, resolve_isolation


@pytest.fixture(scope="session")
def namespace_isolation() -> Isolation:
    """Namespace isolation, confirmed by a probe call; tests needing it skip where it is absent."""
    try:
        return asyncio.run(resolve_isolation(SandboxConfig(isolation="namespace")))
    except SandboxError as exc:
        pytest.skip(f"namespace isolation unavailable: {exc}")


@pytest.fixture(params=["namespace", "process"])
def any_isolation(request: pytest.FixtureRequest) -> Isolation:
    """Each isolation level this machine offers."""
    if request.param == "namespace":
        isolation: Isolation = request.getfixturevalue("namespace_isolation")
        return isolation
    return process_isolation()
