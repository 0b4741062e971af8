"""A protocol-level double of a SGLang 0.5.x server, for the ``sglang`` engine's tests only.

It speaks SGLang's native HTTP API field for field (shapes read from sgl-project/sglang:
``managers/io_struct.py``, ``sampling/sampling_params.py``, ``entrypoints/http_server.py``,
``entrypoints/v1_loads.py``) and validates like SGLang: exactly one of ``text`` / ``input_ids`` /
``input_embeds``; unknown ``sampling_params`` keys, wrong JSON types and out-of-range values are
400 ``{"error": {"message"}}``; wrongly typed top-level fields are FastAPI's 422 ``{"detail"}``;
a duplicate in-flight ``rid`` is 400; a full queue is 503.

What it models: continuous batching at ``tokens_per_s`` decode steps per second (each running
request gains one token per step), at most ``max_running`` running, a waiting queue ordered by
priority (larger first) then arrival, ``max_new_tokens`` (0 = prefill only), ``stop_token_ids``
and EOS (``ignore_eos``), aborts by rid prefix (a running request returns 200 with its partial
output and ``finish_reason`` type ``abort``), SSE streaming (whole output per frame, or deltas
with ``incremental``), a prefix cache (``cached_tokens``), ``/v1/loads``, ``/server_info``.
What it does not: a model. Token ``k`` depends only on the context before it, so a generation
resumed from its partial output continues exactly as the uninterrupted one.

Run it alone (the supervisor tests launch it as a "server command"):
``python sglang_double.py --port 30000 [--tokens-per-s 200] [--startup-delay-s 1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

SAMPLING_KEYS: dict[str, tuple[type, ...]] = {
    "max_new_tokens": (int,), "stop": (str, list), "stop_token_ids": (list,),
    "stop_regex": (str, list), "temperature": (float, int), "top_p": (float, int),
    "top_k": (int,), "min_p": (float, int), "frequency_penalty": (float, int),
    "presence_penalty": (float, int), "repetition_penalty": (float, int),
    "min_new_tokens": (int,), "n": (int,), "json_schema": (str,), "regex": (str,),
    "ebnf": (str,), "structural_tag": (str,), "ignore_eos": (bool,),
    "skip_special_tokens": (bool,), "spaces_between_special_tokens": (bool,),
    "no_stop_trim": (bool,), "custom_params": (dict,), "stream_interval": (int,),
    "logit_bias": (dict,), "sampling_seed": (int,),
}  # fmt: skip
"""The API keys of SGLang's ``SamplingParams`` and the JSON types each accepts."""


class BadRequest(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body)
        self.status, self.body = status, body


def _error(message: str) -> BadRequest:
    return BadRequest(400, {"error": {"message": message}})


def _type_error(field_name: str, expected: str) -> BadRequest:
    item = {"loc": ["body", field_name], "msg": f"Input should be {expected}", "type": "type"}
    return BadRequest(422, {"detail": [item]})


@dataclass
class DoubleConfig:
    tokens_per_s: float = 500.0
    max_running: int = 4
    max_queued: int = 256
    vocab_size: int = 1000
    eos_token_id: int | None = None
    context_length: int = 32768
    max_total_num_tokens: int = 200_000
    priority_scheduling: bool = True
    incremental: bool = False
    legacy_abort_errors: bool = False
    legacy_paths: bool = False
    """Serve only the old names (``/get_server_info``; no ``/ready``), like older releases."""
    """Answer an aborted request like older SGLang: HTTP 400, or an error frame in a stream."""
    model_path: str = "heddle/sglang-double"
    tp_size: int = 1
    startup_delay_s: float = 0.0


def next_token(context: list[int], vocab_size: int) -> int:
    """The double's "model": depends only on the context, never on batching or resumption."""
    return (context[-1] * 31 + len(context) * 17 + 11) % vocab_size if context else 1


def token_logprob(token: int) -> float:
    return -(0.05 + (token % 17) / 10.0)


@dataclass
class Req:
    rid: str
    input_ids: list[int]
    max_new_tokens: int
    stop_token_ids: frozenset[int]
    ignore_eos: bool
    priority: int | None
    return_logprob: bool
    arrival: int
    created_s: float
    output_ids: list[int] = field(default_factory=list)
    finish_reason: dict[str, Any] | None = None
    cached_tokens: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def rank(self) -> tuple[int, int]:
        priority = -(2**62) if self.priority is None else self.priority
        return (-priority, self.arrival)

    def output(self, *, since: int = 0) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": self.rid, "finish_reason": self.finish_reason,
            "prompt_tokens": len(self.input_ids), "completion_tokens": len(self.output_ids),
            "cached_tokens": self.cached_tokens, "weight_version": "default",
            "e2e_latency": time.monotonic() - self.created_s, "num_retractions": 0,
        }  # fmt: skip
        if self.return_logprob:
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = [
                [token_logprob(t), t, None] for t in self.output_ids[since:]
            ]
        ids = self.output_ids[since:]
        return {
            "text": "".join(chr(32 + t % 95) for t in ids),
            "output_ids": ids,
            "meta_info": meta,
        }


class DoubleScheduler:
    """Waiting queue, running batch and prefix cache; runs on the server's event loop."""

    def __init__(self, config: DoubleConfig) -> None:
        self.config = config
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.in_flight: dict[str, Req] = {}
        self.cached: dict[int, Any] = {}
        """Prefix trie: token -> subtree (a radix cache without the path compression)."""
        self.num_cached_tokens = 0
        self.admission_log: list[str] = []
        self.num_arrivals = 0
        self.num_cache_hits = 0

    def submit(self, req: Req) -> None:
        if req.rid in self.in_flight:
            raise _error(f"Duplicate request ID detected: {req.rid}")
        if len(self.waiting) >= self.config.max_queued:
            raise BadRequest(503, {"detail": "The request queue is full."})
        self.in_flight[req.rid] = req
        self.waiting.append(req)

    def abort(self, rid: str, abort_all: bool) -> None:
        for req in list(self.in_flight.values()):
            if abort_all or req.rid.startswith(rid):
                where = "waiting queue" if req in self.waiting else "running batch"
                self.finish(req, {"type": "abort", "message": f"Abort in {where}"})

    def finish(self, req: Req, reason: dict[str, Any]) -> None:
        req.finish_reason = reason
        self.in_flight.pop(req.rid, None)
        for queue in (self.waiting, self.running):
            if req in queue:
                queue.remove(req)
        self.remember(req.input_ids + req.output_ids)
        req.changed.set()

    def remember(self, tokens: list[int]) -> None:
        """Insert into the prefix trie (one node per cached token); a full cache starts over."""
        if self.num_cached_tokens + len(tokens) > self.config.max_total_num_tokens:
            self.cached.clear()
            self.num_cached_tokens = 0
        node = self.cached
        for token in tokens:
            if token not in node:
                node[token] = {}
                self.num_cached_tokens += 1
            node = node[token]

    def prefix_hit(self, tokens: list[int]) -> int:
        node, num_matched = self.cached, 0
        for token in tokens:
            if token not in node:
                break
            node, num_matched = node[token], num_matched + 1
        return min(num_matched, max(0, len(tokens) - 1))  # the last token is always computed

    def step(self) -> None:
        self.waiting.sort(key=Req.rank)
        while self.waiting and len(self.running) < self.config.max_running:
            self.admit(self.waiting.pop(0))
        for req in list(self.running):
            self.decode(req)

    def admit(self, req: Req) -> None:
        self.admission_log.append(req.rid)
        req.cached_tokens = self.prefix_hit(req.input_ids)
        self.num_cache_hits += req.cached_tokens
        self.remember(req.input_ids)
        if req.max_new_tokens == 0:
            self.finish(req, {"type": "length", "length": 0})
        else:
            self.running.append(req)

    def decode(self, req: Req) -> None:
        token = next_token(req.input_ids + req.output_ids, self.config.vocab_size)
        req.output_ids.append(token)
        req.changed.set()
        is_eos = token == self.config.eos_token_id and not req.ignore_eos
        if token in req.stop_token_ids or is_eos:
            self.finish(req, {"type": "stop", "matched": token})
        elif len(req.output_ids) >= req.max_new_tokens:
            self.finish(req, {"type": "length", "length": req.max_new_tokens})


def parse_generate(body: Any, config: DoubleConfig, arrival: int) -> tuple[Req, bool]:
    """Validate a ``/generate`` body like SGLang; the request and its ``stream`` flag."""
    if not isinstance(body, dict):
        raise _type_error("", "a valid dictionary")
    given = [key for key in ("text", "input_ids", "input_embeds") if body.get(key) is not None]
    if len(given) != 1:
        raise _error("Either text, input_ids or input_embeds should be provided (exactly one).")
    if "input_embeds" in given:
        raise _error("input_embeds is not supported by this server")
    input_ids = _input_ids(body)
    params = _sampling(body.get("sampling_params") or {})
    max_new = params.get("max_new_tokens", 128)
    if len(input_ids) + max_new > config.context_length:
        raise _error(
            f"Requested token count exceeds the model's maximum context length of "
            f"{config.context_length} tokens."
        )
    for name, kind in (("priority", int), ("rid", str), ("stream", bool)):
        value = body.get(name)
        if value is not None and (
            not isinstance(value, kind) or isinstance(value, bool) != (kind is bool)
        ):
            raise _type_error(name, f"a valid {kind.__name__}")
    req = Req(
        rid=body.get("rid") or f"auto{arrival:012d}", input_ids=input_ids, max_new_tokens=max_new,
        stop_token_ids=frozenset(params.get("stop_token_ids") or ()),
        ignore_eos=params.get("ignore_eos", False),
        priority=body.get("priority") if config.priority_scheduling else None,
        return_logprob=bool(body.get("return_logprob")), arrival=arrival,
        created_s=time.monotonic(),
    )  # fmt: skip
    return req, bool(body.get("stream"))


def _input_ids(body: dict[str, Any]) -> list[int]:
    if body.get("text") is not None:
        if not isinstance(body["text"], str):
            raise _type_error("text", "a valid string")
        return list(body["text"].encode())
    ids = body["input_ids"]
    if not isinstance(ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in ids
    ):
        raise _type_error("input_ids", "a list of integers")
    if not ids:
        raise _error("input_ids cannot be empty.")
    return ids


def _sampling(params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise _type_error("sampling_params", "a valid dictionary")
    for key, value in params.items():
        if key not in SAMPLING_KEYS:
            raise _error(f"SamplingParams.__init__() got an unexpected keyword argument '{key}'")
        kinds = SAMPLING_KEYS[key]
        if value is not None and (
            not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
        ):
            expected = "/".join(kind.__name__ for kind in kinds)
            raise _error(f"sampling_params.{key}: expected {expected}, got {value!r}")
    _verify(params)
    return params


def _verify(params: dict[str, Any]) -> None:
    """SGLang's ``SamplingParams.verify`` range checks (message texts as SGLang words them)."""
    temperature, top_p = params.get("temperature", 1.0), params.get("top_p", 1.0)
    if not math.isfinite(temperature) or temperature < 0:
        raise _error(f"temperature must be a non-negative finite number, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise _error(f"top_p must be in (0, 1], got {top_p}.")
    max_new = params.get("max_new_tokens", 128)
    if max_new is not None and max_new < 0:
        raise _error(f"max_new_tokens must be at least 0, got {max_new}.")
    stop_ids = params.get("stop_token_ids") or []
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise _error("stop_token_ids must be a list of integers")


class SglangDouble:
    """The double's HTTP server; ``start()`` runs it on its own thread and event loop."""

    def __init__(self, config: DoubleConfig | None = None, *, port: int = 0) -> None:
        self.config = config or DoubleConfig()
        self.port = port
        self.scheduler = DoubleScheduler(self.config)
        self.bodies: list[dict[str, Any]] = []
        self._fail: list[int] = []
        self._started_s = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail_next(self, num_requests: int, status: int = 503) -> None:
        """The next ``num_requests`` ``/generate`` calls answer ``status`` (thread-safe)."""
        self._call(lambda: self._fail.extend([status] * num_requests))

    def start(self) -> SglangDouble:
        ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self.serve(ready)), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the SGLang double did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> SglangDouble:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    async def serve(self, ready: threading.Event | None = None) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", self.port)
        self.port = server.sockets[0].getsockname()[1]
        stepper = asyncio.create_task(self._step_loop())
        if ready is not None:
            ready.set()
        async with server:
            await self._stop.wait()
        stepper.cancel()

    def _call(self, action: Any) -> None:
        if self._loop is None:
            action()
        else:
            self._loop.call_soon_threadsafe(action)

    async def _step_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0 / self.config.tokens_per_s)
            self.scheduler.step()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        line = await reader.readline()
        if not line:
            return False
        method, target, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = header.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        path = target.split("?", 1)[0]
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            await _send(writer, 422, {"detail": [{"loc": ["body"], "msg": "JSON decode error"}]})
            return True
        try:
            return await self._route(method, path, body, writer)
        except BadRequest as exc:
            await _send(writer, exc.status, exc.body)
            return True

    async def _route(self, method: str, path: str, body: Any, writer: asyncio.StreamWriter) -> bool:
        is_up = time.monotonic() - self._started_s >= self.config.startup_delay_s
        if self.config.legacy_paths and path in ("/ready", "/server_info", "/model_info"):
            path = "/missing"
        if path == "/generate" and method in ("POST", "PUT"):
            return await self._generate(body, writer)
        if path == "/abort_request" and method == "POST":
            body = body or {}
            self.scheduler.abort(str(body.get("rid") or ""), bool(body.get("abort_all")))
            await _send(writer, 200, None)
        elif path in ("/health", "/ready"):
            await _send(writer, 200 if is_up else 503, None)
        elif path == "/v1/loads":
            await _send(writer, 200, self._loads())
        elif path in ("/server_info", "/get_server_info"):
            await _send(writer, 200, self._server_info())
        elif path in ("/model_info", "/get_model_info"):
            await _send(writer, 200, {"model_path": self.config.model_path, "is_generation": True})
        elif path == "/flush_cache":
            self.scheduler.cached.clear()
            self.scheduler.num_cached_tokens = 0
            await _send(writer, 200, None)
        else:
            await _send(writer, 404, {"detail": "Not Found"})
        return True

    async def _generate(self, body: Any, writer: asyncio.StreamWriter) -> bool:
        if self._fail:
            await _send(writer, self._fail.pop(0), {"detail": "injected failure"})
            return True
        req, stream = parse_generate(body, self.config, self.scheduler.num_arrivals)
        self.scheduler.num_arrivals += 1
        self.scheduler.submit(req)
        self.bodies.append(body)
        if not stream:
            while req.finish_reason is None:
                req.changed.clear()
                await req.changed.wait()
            if self._is_legacy_abort(req):
                await _send(writer, 400, {"error": {"message": req.finish_reason["message"]}})
            else:
                await _send(writer, 200, req.output())
            return True
        await self._stream(req, writer)
        return False

    def _is_legacy_abort(self, req: Req) -> bool:
        reason = req.finish_reason
        return self.config.legacy_abort_errors and reason is not None and reason["type"] == "abort"

    async def _stream(self, req: Req, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")  # fmt: skip
        sent = 0
        try:
            while True:
                req.changed.clear()
                if self._is_legacy_abort(req):
                    message = req.finish_reason["message"]  # type: ignore[index]
                    await _chunk(
                        writer,
                        b"data: " + json.dumps({"error": {"message": message}}).encode() + b"\n\n",
                    )
                    break
                if len(req.output_ids) > sent or req.finish_reason is not None:
                    # Like SGLang, the first frame comes with the first token, not before.
                    frame = req.output(since=sent if self.config.incremental else 0)
                    sent = len(req.output_ids)
                    await _chunk(writer, b"data: " + json.dumps(frame).encode() + b"\n\n")
                if req.finish_reason is not None:
                    break
                await req.changed.wait()
            await _chunk(writer, b"data: [DONE]\n\n")
            await _chunk(writer, b"")
        except ConnectionError:
            # SGLang aborts a streamed request whose client went away.
            self.scheduler.abort(req.rid, False)

    def _loads(self) -> dict[str, Any]:
        s = self.scheduler
        used = sum(len(r.input_ids) + len(r.output_ids) for r in s.running)
        load = {
            "dp_rank": 0, "timestamp": time.time(), "num_running_reqs": len(s.running),
            "num_waiting_reqs": len(s.waiting), "num_used_tokens": used,
            "max_total_num_tokens": self.config.max_total_num_tokens,
            "token_usage": used / self.config.max_total_num_tokens,
            "gen_throughput": 0.0, "cache_hit_rate": 0.0, "utilization": 0.0,
            "max_running_requests": self.config.max_running,
        }  # fmt: skip
        return {"timestamp": "", "version": "0.5.23-double", "accelerator": None,
                "num_accelerators": self.config.tp_size, "loads": [load]}  # fmt: skip

    def _server_info(self) -> dict[str, Any]:
        return {
            "model_path": self.config.model_path, "served_model_name": self.config.model_path,
            "tp_size": self.config.tp_size, "dp_size": 1, "page_size": 1,
            "max_running_requests": self.config.max_running,
            "max_total_num_tokens": self.config.max_total_num_tokens,
            "enable_priority_scheduling": self.config.priority_scheduling,
            "schedule_low_priority_values_first": False,
            "incremental_streaming_output": self.config.incremental,
            "skip_tokenizer_init": False, "version": "0.5.23-double", "internal_states": [{}],
        }  # fmt: skip


async def _send(writer: asyncio.StreamWriter, status: int, body: Any) -> None:
    payload = b"" if body is None else json.dumps(body).encode()
    kind = "application/json" if body is not None else "text/plain"
    writer.write(
        f"HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {len(payload)}\r\n"
        f"connection: keep-alive\r\n\r\n".encode()
        + payload
    )
    await writer.drain()


async def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


REAL_SERVER_ENV = "HEDDLE_SGLANG_URL"
"""Set to a real server's URL (deploy/gpu_check.sh does) to run the adapter tests against it."""


def real_server_url() -> str | None:
    return os.environ.get(REAL_SERVER_ENV) or None


async def poll_until(predicate: Any, *, timeout_s: float = 30.0, what: str = "condition") -> None:
    """Wait until ``predicate()`` is true (checked every 10 ms); AssertionError after timeout."""
    for _ in range(int(timeout_s * 100)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description="SGLang protocol double (tests only)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens-per-s", type=float, default=500.0)
    parser.add_argument("--max-running", type=int, default=4)
    parser.add_argument("--startup-delay-s", type=float, default=0.0)
    parser.add_argument("--exit-after-s", type=float, default=0.0, help="crash after (0: never)")
    parser.add_argument("--model-path", default="heddle/sglang-double")
    parser.add_argument("--tp-size", type=int, default=1)
    args = parser.parse_args()
    config = DoubleConfig(
        tokens_per_s=args.tokens_per_s,
        max_running=args.max_running,
        startup_delay_s=args.startup_delay_s,
        model_path=args.model_path,
        tp_size=args.tp_size,
    )
    if args.exit_after_s > 0:
        threading.Timer(args.exit_after_s, lambda: os._exit(17)).start()
    asyncio.run(SglangDouble(config, port=args.port).serve())


if __name__ == "__main__":
    main()
