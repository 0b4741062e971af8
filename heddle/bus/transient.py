"""JetStream API errors that pass: after a cluster node dies, its streams and consumers elect
new leaders (a few seconds) and clients connected to it reconnect elsewhere; meanwhile API
requests time out or find no responder. Reads that a caller would otherwise take as a failure
are retried here for a bounded time."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
from nats.js.errors import APIError, ServiceUnavailableError

T = TypeVar("T")
log = logging.getLogger(__name__)

_TEMPORARILY_UNAVAILABLE = 10008
"""JetStream error code: the system (meta leader) is temporarily unavailable."""
_TRANSIENT_TYPES = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    ServiceUnavailableError,
)


STORAGE_REFUSALS = frozenset({10012, 10047, 10077})
"""JetStream error codes of a store that cannot take a write now: a consumer's store could
not be created (10012), storage resources are exhausted (10047), a stream's store failed
(10077). A full disk answers so; the request can succeed once space is back."""


def is_storage_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is JetStream refusing for lack of storage (worth waiting out)."""
    return isinstance(exc, APIError) and exc.err_code in STORAGE_REFUSALS


async def retry_storage_refusals(
    call: Callable[[], Awaitable[T]], what: str, *, pause_s: float = 2.0
) -> T:
    """``await call()`` (transient errors asked again as ``retry_transient`` does), again every
    ``pause_s`` for as long as the store refuses for lack of space: the caller waits for the
    space to come back (the control plane's store guard resets a wedged store)."""
    warned = False
    while True:
        try:
            return await retry_transient(call, what)
        except APIError as exc:
            if not is_storage_refusal(exc):
                raise
            if not warned:
                log.warning("%s: the JetStream store refuses (%s); waiting for space", what, exc)
                warned = True
        await asyncio.sleep(pause_s)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is what a JetStream request meets during a leader election or a
    reconnect (worth asking again shortly)."""
    if isinstance(exc, _TRANSIENT_TYPES):
        return True
    return isinstance(exc, APIError) and exc.err_code == _TEMPORARILY_UNAVAILABLE


async def retry_transient(
    call: Callable[[], Awaitable[T]], what: str, *, deadline_s: float = 30.0, pause_s: float = 0.5
) -> T:
    """``await call()``, again after ``pause_s`` while it fails with a transient error, for up
    to ``deadline_s``; then that error propagates. Other errors propagate at once."""
    started = time.monotonic()
    while True:
        try:
            return await call()
        except Exception as exc:
            if not is_transient(exc) or time.monotonic() - started > deadline_s:
                raise
            log.info("%s: %r; asking again", what, exc)
        await asyncio.sleep(pause_s)
