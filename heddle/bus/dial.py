"""Opening a ``Bus``'s NATS connection (``BusOptions``) and listening to what the server says
about it.

``Dialer.connect(url)`` returns a connected ``LeanClient`` or raises ``BusUnavailable`` naming the
URL (password masked) and the reason the server gave (authorization, TLS). The first connection
gets a few attempts within a bound (nats-py would otherwise retry forever, and never returns
from a failed TLS handshake); after it the configured reconnect policy applies. The error
callback records the server's permission violations (newest last, at most 100) and hands a
refused publish's subject to ``on_publish_denied``; other errors are logged unless the bus is
closing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import nats.errors

from heddle.bus.connection import (
    Violation,
    connect_options,
    describe_error,
    parse_violation,
    replicas_for,
)
from heddle.bus.publisher import PublishOptions
from heddle.bus.wire import LeanClient
from heddle.config import Settings
from heddle.errors import UserError

log = logging.getLogger(__name__)

_INITIAL_CONNECT_ATTEMPTS = 2


class BusUnavailable(UserError):
    """NATS could not be reached (the message names the URL)."""


@dataclass(frozen=True, slots=True)
class BusOptions:
    """How a ``Bus`` connects and what it provisions."""

    name: str = "heddle"
    """Connection name shown by ``nats server report connections``."""
    num_replicas: int | None = None
    """Replicas of the streams and buckets this bus creates; None: ``Settings.nats_replicas``,
    else what the server suggests (1 on one server, 3 on a cluster)."""
    provision: bool = True
    """Create or update Heddle's streams on start."""
    connect_timeout_s: float = 5.0
    reconnect_wait_s: float = 0.5
    max_reconnect_attempts: int = -1
    """-1: keep reconnecting forever (a restarting server is waited for)."""
    publish: PublishOptions = field(default_factory=PublishOptions)
    payload_max_age_s: float = 7 * 24 * 3600.0
    """How long bucket ``heddle-payloads`` keeps an offloaded array (``heddle.bus.payloads``);
    applies when the bucket is created."""


class Dialer:
    """Connects one bus and keeps what its connection's callbacks learn."""

    def __init__(
        self,
        settings: Settings,
        options: BusOptions,
        on_publish_denied: Callable[[str, str], None],
    ) -> None:
        self.settings = settings
        self.options = options
        self.on_publish_denied = on_publish_denied
        """Called with (subject, message) for a publish the server refused for permissions."""
        self.is_closing = False
        """Set by the bus while it closes: disconnects and errors are expected then."""
        self.violations: list[Violation] = []
        """Permission violations the server reported on this connection (newest last)."""
        self.reconnected_at_s = float("-inf")
        """Wall-clock time of the latest reconnection (-inf: never reconnected): whoever
        counts others' silence discounts the time this connection was down."""
        self.is_connection_lost = False
        """True from a disconnection until the reconnection is complete (subscriptions
        restored and flushed)."""
        self._last_error: Exception | None = None
        self._tls_refused = asyncio.Event()

    async def connect(self, url: str) -> LeanClient:
        client = LeanClient()
        servers = [part.strip() for part in url.split(",") if part.strip()]
        client.requires_tls = requires_tls(self.settings, servers)
        connect_timeout_s = max(1, self.options.connect_timeout_s)
        bound_s = (
            (connect_timeout_s + self.options.reconnect_wait_s)
            * (_INITIAL_CONNECT_ATTEMPTS + 1)
            * max(1, len(servers))
        )
        self._tls_refused = asyncio.Event()
        try:
            await _first_of(
                client.connect(
                    servers,
                    name=self.options.name,
                    connect_timeout=int(connect_timeout_s),
                    reconnect_time_wait=self.options.reconnect_wait_s,  # type: ignore[arg-type]
                    max_reconnect_attempts=_INITIAL_CONNECT_ATTEMPTS,
                    allow_reconnect=True,
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                    **connect_options(self.settings),
                ),
                self._tls_refused,
                bound_s,
            )
        except (OSError, nats.errors.Error, TimeoutError) as exc:
            # nats-py reports why a server refused (authorization, TLS) to the error callback
            # and raises NoServersError: name the reason.
            with contextlib.suppress(Exception):
                await client.close()
            reason = describe_error(self._last_error or exc)
            where = without_password(url)
            raise BusUnavailable(f"cannot reach NATS at {where}: {reason}") from None
        client.options["max_reconnect_attempts"] = self.options.max_reconnect_attempts
        return client

    def replicas(self, client: LeanClient) -> tuple[int, str]:
        """Replicas of what the bus creates, and where that number came from (for messages)."""
        if self.options.num_replicas is not None:
            return self.options.num_replicas, "asked by this process"
        if self.settings.nats_replicas is not None:
            return self.settings.nats_replicas, "from --nats-replicas / HEDDLE_NATS_REPLICAS"
        suggested = replicas_for(client._server_info)
        where = "a cluster" if suggested > 1 else "a single server"
        return suggested, f"the default on {where}"

    async def _on_error(self, exc: Exception) -> None:
        self._last_error = exc
        if isinstance(exc, ssl.SSLError):
            self._tls_refused.set()
        violation = parse_violation(str(exc))
        if violation is not None:
            self.violations.append(violation)  # in place: provisioning holds this list
            del self.violations[:-100]
            log.error("%s", violation.message())
            if violation.operation == "publish":
                self.on_publish_denied(violation.subject, violation.message())
            return
        if not self.is_closing:
            log.warning("nats: %r", exc)

    async def _on_disconnected(self) -> None:
        self.is_connection_lost = True
        if not self.is_closing:
            log.warning(
                "nats: disconnected from %s; reconnecting",
                self.settings.nats_url or "embedded server",
            )

    async def _on_reconnected(self) -> None:
        self.reconnected_at_s = time.time()
        self.is_connection_lost = False
        log.info("nats: reconnected")


def requires_tls(settings: Settings, servers: list[str]) -> bool:
    """Whether the connection must be encrypted: a CA was given, or a ``tls://`` URL."""
    return settings.nats_tls_ca is not None or any(s.startswith("tls://") for s in servers)


class _SslEofNotice(logging.Filter):
    """Drops asyncio's notice that nats-py's stream protocol keeps a TLS connection half open
    after the server's EOF, logged at every close of a TLS connection (asyncio's sslproto
    closes it anyway)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect when using ssl" not in record.getMessage()


logging.getLogger("asyncio").addFilter(_SslEofNotice())


def without_password(url: str) -> str:
    """``url`` with any password in it masked (for messages and logs)."""
    return re.sub(r"(://[^:/@,]+:)[^@/,]+@", r"\1***@", url)


async def _first_of(connecting: Awaitable[None], refused: asyncio.Event, timeout_s: float) -> None:
    """Await ``connecting``; ``TimeoutError`` after ``timeout_s`` or as soon as ``refused`` is
    set (a failed TLS handshake, after which nats-py would wait forever)."""
    task = asyncio.ensure_future(connecting)
    waiter = asyncio.ensure_future(refused.wait())
    try:
        done, _ = await asyncio.wait(
            {task, waiter}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        waiter.cancel()
    if task in done:
        task.result()
        return
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    raise TimeoutError("connection refused" if refused.is_set() else "connection timed out")
