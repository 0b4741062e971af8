"""An async HTTP client of one SGLang server's native API (``/generate``, ``/abort_request``,
``/v1/loads``, ``/server_info``, ``/ready``).

Failure contract:
- HTTP 503 and connection failures (the request never reached the server) are retried with
  exponential backoff, up to ``RetryPolicy.max_retries`` times; then ``SglangUnavailable``.
  A 503 refusing a ``priority`` (a server without priority scheduling that aborts on one) is
  not retried: it raises ``SglangError`` at once.
- Any other error status raises ``SglangError`` carrying the server's own message (a 400 names the
  bad field) and the status code. A connection lost mid-response is not retried (the server may
  have run the request): it raises ``SglangError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import httpx
import msgspec

from heddle.workers.engines.base import EngineError
from heddle.workers.engines.sglang import protocol
from heddle.workers.engines.sglang.protocol import (
    AbortBody,
    GenerateBody,
    GenerateOutput,
    LoadsReport,
    ServerInfo,
    UpdateWeightsBody,
    UpdateWeightsReply,
)

READY_PATHS = ("/ready", "/v1/loads")
"""Readiness probes, first that exists wins (``/health`` may run a real generation: avoid it)."""
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
"""Current name first; the ``/get_*`` name is the deprecated one older servers still serve."""

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


class _Retriable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SglangClient:
    """One server's client; use as ``async with SglangClient(url) as client``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeouts: ClientTimeouts = ClientTimeouts(),
        retry: RetryPolicy = RetryPolicy(),
        incremental_streaming: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"SGLang URL {base_url!r} must start with http:// or https://")
        self.base_url = base_url.rstrip("/")
        self.timeouts = timeouts
        self.retry = retry
        self.incremental_streaming = incremental_streaming
        """True when the server runs with ``--incremental-streaming-output`` (frames are deltas)."""
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeouts.request_s, connect=timeouts.connect_s),
            # Every in-flight generation holds a connection; aborts must never queue behind them.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            trust_env=False,
            transport=transport,
        )

    async def __aenter__(self) -> SglangClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def generate(self, body: GenerateBody, *, routing_key: str = "") -> GenerateOutput:
        """``POST /generate`` without streaming: the finished (or aborted) output.
        ``routing_key`` goes out as ``X-SMG-Routing-Key`` (an ``sglang-router`` routes
        consistent hashing on it)."""
        payload = protocol.encode(msgspec.structs.replace(body, stream=False))
        headers = _routing(routing_key)
        response = await self._with_retries(
            lambda: self._send_once("POST", "/generate", payload, headers=headers)
        )
        return _decode(protocol.decode_output, response.content, "/generate")

    async def generate_stream(
        self, body: GenerateBody, *, routing_key: str = ""
    ) -> AsyncIterator[GenerateOutput]:
        """``POST /generate`` with ``stream``: yields the whole output so far at each frame
        (frames are merged when the server streams deltas); the last one is finished."""
        payload = protocol.encode(msgspec.structs.replace(body, stream=True))
        merger = protocol.StreamMerger(incremental=self.incremental_streaming)
        async with self._open_stream(payload, _routing(routing_key)) as response:
            async for data in _sse_payloads(response):
                if data == "[DONE]":
                    return
                frame = _decode(protocol.decode_frame, data.encode(), "/generate stream")
                if frame.error is not None:
                    raise SglangError(frame.error.message or "stream error", status_code=400)
                yield merger.add(frame.to_output())

    async def abort(self, rid: str) -> None:
        """Abort the request ``rid`` (and, as SGLang matches prefixes, any rid it starts)."""
        if not rid:
            raise ValueError("abort needs a non-empty rid (use abort_all to abort everything)")
        await self._control_post("/abort_request", AbortBody(rid=rid))

    async def abort_all(self) -> None:
        await self._control_post("/abort_request", AbortBody(abort_all=True))

    async def update_weights_from_disk(self, body: UpdateWeightsBody) -> UpdateWeightsReply:
        """``POST /update_weights_from_disk``: the server finishes its in-flight requests,
        loads the checkpoint and flushes its radix cache. ``SglangError`` when it refuses
        (HTTP 400 with ``success`` false and its message); waits as long as a generation."""
        payload = protocol.encode(body)
        path = "/update_weights_from_disk"
        response = await self._with_retries(
            lambda: self._send_once("POST", path, payload, timeout_s=self.timeouts.request_s)
        )
        reply = _decode(protocol.decode_update_weights, response.content, path)
        if not reply.success:
            raise SglangError(f"SGLang {path} failed: {reply.message}", status_code=400)
        return reply

    async def loads(self) -> LoadsReport:
        response = await self._control_get(("/v1/loads",))
        return _decode(protocol.decode_loads, response.content, "/v1/loads")

    async def server_info(self) -> ServerInfo:
        response = await self._control_get(SERVER_INFO_PATHS)
        return _decode(protocol.decode_server_info, response.content, "/server_info")

    async def router_workers(self) -> list[str]:
        """The server URLs of the ``sglang-router`` this client talks to (``GET /workers``)."""
        response = await self._control_get(("/workers",))
        listing = _decode(protocol.decode_router_workers, response.content, "/workers")
        return [worker.url for worker in listing.workers]

    async def is_ready(self) -> bool:
        """True when the server answers its readiness probe with 200 (never raises)."""
        for path in READY_PATHS:
            try:
                response = await self._http.get(path, timeout=self.timeouts.control_s)
            except httpx.HTTPError:
                return False
            if response.status_code != 404:
                return response.status_code == 200
        return False

    async def wait_ready(self, timeout_s: float, *, poll_interval_s: float = 0.5) -> None:
        """Poll readiness until it passes; ``SglangUnavailable`` after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not await self.is_ready():
            if loop.time() >= deadline:
                raise SglangUnavailable(
                    f"SGLang server at {self.base_url} not ready after {timeout_s:.0f} s"
                )
            await asyncio.sleep(poll_interval_s)

    async def _send_once(
        self,
        method: str,
        path: str,
        payload: bytes | None = None,
        *,
        timeout_s: float | None = None,
        stream: bool = False,
        missing_ok: bool = False,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One attempt. Refused connections and 503 raise ``_Retriable``; other failures raise
        ``SglangError``; a 404 returns as is when ``missing_ok`` (the caller tries another
        path). A streamed response is returned open."""
        request = self._http.build_request(
            method,
            path,
            content=payload,
            headers={**_JSON, **(headers or {})} if payload is not None else None,
            timeout=httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s,
        )
        try:
            response = await self._http.send(request, stream=stream)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _Retriable(f"cannot connect: {exc}") from exc
        except httpx.HTTPError as exc:
            raise SglangError(f"{method} {path} failed: {exc!r}") from exc
        if stream and response.status_code >= 400:
            await response.aread()
            await response.aclose()
        if missing_ok and response.status_code == 404:
            return response
        return _checked(response, path)

    @asynccontextmanager
    async def _open_stream(
        self, payload: bytes, headers: dict[str, str]
    ) -> AsyncIterator[httpx.Response]:
        response = await self._with_retries(
            lambda: self._send_once("POST", "/generate", payload, stream=True, headers=headers)
        )
        try:
            yield response
        finally:
            await response.aclose()

    async def _control_post(self, path: str, body: AbortBody) -> None:
        payload = protocol.encode(body)
        await self._with_retries(
            lambda: self._send_once("POST", path, payload, timeout_s=self.timeouts.control_s)
        )

    async def _control_get(self, paths: Sequence[str]) -> httpx.Response:
        """GET the first of ``paths`` the server has (older servers lack the newer names)."""

        async def attempt() -> httpx.Response:
            for path in paths[:-1]:
                response = await self._send_once(
                    "GET", path, timeout_s=self.timeouts.control_s, missing_ok=True
                )
                if response.status_code != 404:
                    return response
            return await self._send_once("GET", paths[-1], timeout_s=self.timeouts.control_s)

        return await self._with_retries(attempt)

    async def _with_retries(self, attempt: Callable[[], Awaitable[T]]) -> T:
        last_reason = ""
        for retry_index in range(self.retry.max_retries + 1):
            if retry_index:
                await asyncio.sleep(self.retry.delay_s(retry_index - 1))
            try:
                return await attempt()
            except _Retriable as exc:
                last_reason = exc.reason
        raise SglangUnavailable(
            f"SGLang server at {self.base_url} unavailable after "
            f"{self.retry.max_retries + 1} attempts: {last_reason}",
            status_code=503 if "503" in last_reason else None,
        )


_JSON = {"content-type": "application/json"}
ROUTING_KEY_HEADER = "X-SMG-Routing-Key"


def _routing(routing_key: str) -> dict[str, str]:
    return {ROUTING_KEY_HEADER: routing_key} if routing_key else {}


_PERMANENT_503 = ("priority is disabled",)
"""503 answers that a retry cannot change (``--abort-on-priority-when-disabled``)."""


def _checked(response: httpx.Response, path: str) -> httpx.Response:
    if response.status_code == 503:
        message = protocol.error_text(503, response.content)
        if not any(text in message for text in _PERMANENT_503):
            raise _Retriable(f"HTTP 503: {message}")
    if response.status_code >= 400:
        message = protocol.error_text(response.status_code, response.content)
        raise SglangError(
            f"SGLang {path} answered HTTP {response.status_code}: {message}",
            status_code=response.status_code,
        )
    return response


def _decode(decoder: Callable[[bytes], T], content: bytes, what: str) -> T:
    try:
        return decoder(content)
    except msgspec.DecodeError as exc:
        raise SglangError(f"unexpected {what} response from SGLang: {exc}") from exc


async def _sse_payloads(response: httpx.Response) -> AsyncIterator[str]:
    """The payloads of the SSE ``data:`` lines (blank lines, comments and other fields skipped).
    A connection lost mid-stream raises ``SglangError``."""
    try:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                yield line[5:].strip()
    except httpx.HTTPError as exc:
        raise SglangError(f"SGLang stream broke off: {exc!r}") from exc
