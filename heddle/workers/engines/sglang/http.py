"""The HTTP side of the SGLang client: its errors, retry policy, timeouts, and how a response
is checked and read (see ``client`` for the failure contract). ``checked`` raises ``Retriable``
for a 503 a retry can change (not one refusing a ``priority``), ``SglangError`` with the
server's own message for any other error status (``error_text``: the message in any of the
error shapes SGLang answers with, else the raw body, shortened); ``sse_payloads`` yields the
``data:`` payloads of a stream and turns a connection lost mid-stream into ``SglangError``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import msgspec

from heddle.workers.engines.base import EngineError
from heddle.workers.engines.sglang.protocol import ErrorDetail

T = TypeVar("T")


class SglangError(EngineError):
    """The SGLang server refused or failed a call; the message is the server's own."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class SglangUnavailable(SglangError):
    """The server could not be reached, or kept answering 503, after every retry."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 5
    """Retries after the first attempt (0: fail at once)."""
    backoff_initial_s: float = 0.2
    """Wait before the first retry; doubles at each retry."""
    backoff_max_s: float = 5.0
    """Ceiling of one wait."""

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.backoff_initial_s < 0 or self.backoff_max_s < 0:
            raise ValueError("retry counts and backoff times must be >= 0")

    def delay_s(self, retry_index: int) -> float:
        """The wait before retry number ``retry_index`` (0-based)."""
        return min(self.backoff_max_s, self.backoff_initial_s * 2.0**retry_index)


@dataclass(frozen=True, slots=True)
class ClientTimeouts:
    connect_s: float = 10.0
    """Opening a connection."""
    request_s: float = 3600.0
    """Longest wait for a response or the next streamed frame (a long generation)."""
    control_s: float = 30.0
    """Control calls: abort, loads, server info, readiness."""


class Retriable(Exception):
    """A failure a retry may cure (the request never reached the server, or a 503)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


ROUTING_KEY_HEADER = "X-SMG-Routing-Key"


def routing_headers(routing_key: str) -> dict[str, str]:
    return {ROUTING_KEY_HEADER: routing_key} if routing_key else {}


_PERMANENT_503 = ("priority is disabled",)
"""503 answers that a retry cannot change (``--abort-on-priority-when-disabled``)."""


def checked(response: httpx.Response, path: str) -> httpx.Response:
    if response.status_code == 503:
        message = error_text(503, response.content)
        if not any(text in message for text in _PERMANENT_503):
            raise Retriable(f"HTTP 503: {message}")
    if response.status_code >= 400:
        message = error_text(response.status_code, response.content)
        raise SglangError(
            f"SGLang {path} answered HTTP {response.status_code}: {message}",
            status_code=response.status_code,
        )
    return response


def decode(decoder: Callable[[bytes], T], content: bytes, what: str) -> T:
    try:
        return decoder(content)
    except msgspec.DecodeError as exc:
        raise SglangError(f"unexpected {what} response from SGLang: {exc}") from exc


async def sse_payloads(response: httpx.Response) -> AsyncIterator[str]:
    """The payloads of the SSE ``data:`` lines (blank lines, comments and other fields skipped).
    A connection lost mid-stream raises ``SglangError``."""
    try:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                yield line[5:].strip()
    except httpx.HTTPError as exc:
        raise SglangError(f"SGLang stream broke off: {exc!r}") from exc


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    """The error shapes SGLang answers with: ``{"error": {"message"}}``, ``{"detail"}`` (FastAPI:
    a string, or a list of validation errors), or a plain ``{"message"}``."""

    error: ErrorDetail | str | None = None
    detail: Any = None
    message: str | None = None

    def text(self) -> str | None:
        if isinstance(self.error, ErrorDetail) and self.error.message:
            return self.error.message
        if isinstance(self.error, str) and self.error:
            return self.error
        if isinstance(self.detail, str):
            return self.detail
        if isinstance(self.detail, list):
            return "; ".join(_validation_item(item) for item in self.detail)
        return self.message


def _validation_item(item: Any) -> str:
    if isinstance(item, dict):
        location = ".".join(str(part) for part in item.get("loc", ()))
        return f"{location}: {item.get('msg', item)}"
    return str(item)


def error_text(status_code: int, body: bytes) -> str:
    """The server's own message for an error response, else its raw text (shortened)."""
    try:
        message = msgspec.json.decode(body, type=ErrorBody).text()
    except msgspec.DecodeError:
        message = None
    if message:
        return message
    raw = body.decode("utf-8", errors="replace").strip()
    return raw[:500] or f"HTTP {status_code} with an empty body"
