"""An async HTTP client of one SGLang server's native API (``/generate``, ``/abort_request``,
``/v1/loads``, ``/server_info``, ``/ready``).

Failure contract (``http``: the errors, retry policy and response checks):
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
from typing import TypeVar

import httpx
import msgspec

from heddle.workers.engines.sglang import protocol
from heddle.workers.engines.sglang.http import (
    ClientTimeouts,
    Retriable,
    RetryPolicy,
    SglangError,
    SglangUnavailable,
    checked,
    decode,
    routing_headers,
    sse_payloads,
)
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
_JSON = {"content-type": "application/json"}


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
        payload = protocol.encode_json(msgspec.structs.replace(body, stream=False))
        headers = routing_headers(routing_key)
        response = await self._with_retries(
            lambda: self._send_once("POST", "/generate", payload, headers=headers)
        )
        return decode(protocol.decode_output, response.content, "/generate")

    async def generate_stream(
        self, body: GenerateBody, *, routing_key: str = ""
    ) -> AsyncIterator[GenerateOutput]:
        """``POST /generate`` with ``stream``: yields the whole output so far at each frame
        (frames are merged when the server streams deltas); the last one is finished."""
        payload = protocol.encode_json(msgspec.structs.replace(body, stream=True))
        merger = protocol.StreamMerger(incremental=self.incremental_streaming)
        async with self._open_stream(payload, routing_headers(routing_key)) as response:
            async for data in sse_payloads(response):
                if data == "[DONE]":
                    return
                frame = decode(protocol.decode_frame, data.encode(), "/generate stream")
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
        payload = protocol.encode_json(body)
        path = "/update_weights_from_disk"
        response = await self._with_retries(
            lambda: self._send_once("POST", path, payload, timeout_s=self.timeouts.request_s)
        )
        reply = decode(protocol.decode_update_weights, response.content, path)
        if not reply.success:
            raise SglangError(f"SGLang {path} failed: {reply.message}", status_code=400)
        return reply

    async def loads(self) -> LoadsReport:
        response = await self._control_get(("/v1/loads",))
        return decode(protocol.decode_loads, response.content, "/v1/loads")

    async def server_info(self) -> ServerInfo:
        response = await self._control_get(SERVER_INFO_PATHS)
        return decode(protocol.decode_server_info, response.content, "/server_info")

    async def router_workers(self) -> list[str]:
        """The server URLs of the ``sglang-router`` this client talks to (``GET /workers``)."""
        response = await self._control_get(("/workers",))
        listing = decode(protocol.decode_router_workers, response.content, "/workers")
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
        """One attempt. Refused connections and 503 raise ``Retriable``; other failures raise
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
            raise Retriable(f"cannot connect: {exc}") from exc
        except httpx.HTTPError as exc:
            raise SglangError(f"{method} {path} failed: {exc!r}") from exc
        if stream and response.status_code >= 400:
            await response.aread()
            await response.aclose()
        if missing_ok and response.status_code == 404:
            return response
        return checked(response, path)

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
        payload = protocol.encode_json(body)
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
            except Retriable as exc:
                last_reason = exc.reason
        raise SglangUnavailable(
            f"SGLang server at {self.base_url} unavailable after "
            f"{self.retry.max_retries + 1} attempts: {last_reason}",
            status_code=503 if "503" in last_reason else None,
        )
