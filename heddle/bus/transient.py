"""Errors that pass, and the one rule that tells them (``is_transient``, by exception type and
JetStream error code, never by the words of a message): after a cluster node dies, its streams and
consumers elect new leaders (a few seconds) and clients connected to it reconnect elsewhere;
meanwhile requests time out, find no responder, or go unacknowledged. Reads that a caller would
otherwise take as a failure are retried here for a bounded time; the worker agent's publishes are
retried with the same ids until stored (``heddle.workers.agent.publisher``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
from nats.js.errors import APIError, ServiceUnavailableError

from heddle.bus.publisher import STORAGE_REFUSALS, PayloadTooLarge, PublishError
from heddle.errors import UserError

T = TypeVar("T")
log = logging.getLogger(__name__)

_TEMPORARILY_UNAVAILABLE = 10008
"""JetStream error code: the system (meta leader) is temporarily unavailable."""
_TRANSIENT_TYPES = (
    OSError,  # sockets; builtin TimeoutError and ConnectionError, and nats' TimeoutError, are ones
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    ServiceUnavailableError,
)
"""A lost, reconnecting or congested connection, a request nobody answered in time. Not
``ConnectionClosedError``: a connection reconnects forever (``heddle.bus.dial``), so a closed
one was closed on purpose and does not come back."""


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
    """Whether ``exc`` is what a NATS request or a JetStream publish meets during a leader
    election or a reconnect (worth asking again shortly, a publish with the same id). A refusal
    of this credential (``UserError``: ``PublishDenied``, ``PermissionDenied``) is not: it will
    not change while the process runs; nor is a publish the stream rejected (an error code) or
    one too large for the server."""
    if isinstance(exc, UserError):
        return False
    if isinstance(exc, PublishError):  # err_code 0: not acknowledged in time
        return exc.err_code == 0 and not isinstance(exc, PayloadTooLarge)
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
