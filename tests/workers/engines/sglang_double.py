"""A protocol-level double of a SGLang 0.5.x server, for the ``sglang`` engine's tests only.

It speaks SGLang's native HTTP API field for field (shapes read from sgl-project/sglang:
``managers/io_struct.py``, ``sampling/sampling_params.py``, ``entrypoints/http_server.py``,
``entrypoints/v1_loads.py``), validates like SGLang (``double_requests``: a bad field is 400 or
422, a duplicate in-flight ``rid`` 400, a full queue 503, a priority without priority
scheduling 503) and schedules as SGLang does with the flags Heddle launches it with
(``double_scheduler``: priority order, KV-bounded admission, priority preemption, retraction,
a radix cache evicting whole leaves LRU, prefill time), which is what the simulator's
``sglang`` engine model assumes. Also: ``max_new_tokens`` (0 = prefill only),
``stop_token_ids`` and EOS (``ignore_eos``), aborts by rid prefix (a running request returns 200
with its partial output and ``finish_reason`` type ``abort``), SSE streaming (whole output per
frame, or deltas with ``incremental``), ``cached_tokens`` and ``num_retractions`` per request,
``/v1/loads`` (with ``gen_throughput`` and ``cache_hit_rate``), ``/server_info``,
``/update_weights_from_disk`` (the "model" changes with each update, the radix cache is flushed).
What it does not: a model. Token ``k`` depends only on the context before it, so a generation
resumed from its partial output continues exactly as the uninterrupted one.

Run it alone, with SGLang's own flags for what it models (the supervisor tests launch it as a
"server command"): ``python sglang_double.py --port 30000 [--enable-priority-scheduling]
[--priority-scheduling-preemption-threshold 10] [--radix-eviction-policy lru]
[--max-running-requests 4] [--max-total-tokens 200000] [--tokens-per-s 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from double_requests import parse_generate
from double_scheduler import BadRequest, DoubleConfig, DoubleScheduler, Req

__all__ = ["DoubleConfig", "SglangDouble", "poll_until", "real_server_url"]


class SglangDouble:
    """The double's HTTP server; ``start()`` runs it on its own thread and event loop."""

    def __init__(self, config: DoubleConfig | None = None, *, port: int = 0) -> None:
        self.config = config or DoubleConfig()
        self.port = port
        self.scheduler = DoubleScheduler(self.config)
        self.bodies: list[dict[str, Any]] = []
        self.weight_updates: list[dict[str, Any]] = []
        """The body of each successful ``/update_weights_from_disk``."""
        self.routing_keys: list[str] = []
        """The ``X-SMG-Routing-Key`` header of each ``/generate`` (empty: none)."""
        self._fail: list[int] = []
        self._started_s = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._routing_key = ""
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
        self._started_s = time.monotonic()  # the start-up delay runs from here
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
        """Admit (the prefill takes its time), then one decode step, at ``tokens_per_s``."""
        while True:
            await asyncio.sleep(1.0 / self.config.tokens_per_s)
            num_prefilled = self.scheduler.schedule()
            if num_prefilled:
                await asyncio.sleep(num_prefilled / self.config.prefill_tokens_per_s)
            self.scheduler.decode(time.monotonic())

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
        parts = line.decode("latin-1").split(" ", 2)
        if len(parts) != 3:
            return False  # not HTTP/1 (the router probes for HTTP/2 first): hang up
        method, target, _ = parts
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
            if path == "/generate":
                self._routing_key = headers.get("x-smg-routing-key", "")
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
            await self._flush_cache(writer)
        elif path == "/update_weights_from_disk" and method == "POST":
            await self._update_weights(body if isinstance(body, dict) else {}, writer)
        else:
            await _send(writer, 404, {"detail": "Not Found"})
        return True

    async def _flush_cache(self, writer: asyncio.StreamWriter) -> None:
        """Like SGLang: only an idle server flushes its radix cache."""
        if self.scheduler.in_flight:
            await _send(writer, 400, {"error": {"message": "Cache not flushed because there "
                                                "are pending requests."}})  # fmt: skip
            return
        self.scheduler.tree.clear()
        await _send(writer, 200, None)

    async def _update_weights(self, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        """Like SGLang's ``/update_weights_from_disk`` (``UpdateWeightFromDiskReqInput``): a
        missing ``model_path`` is 422; in-flight requests finish first (or are aborted with
        ``abort_all_requests``); a path that does not exist is 400 with ``success`` false;
        else the model changes, ``model_info`` names the new path and the radix cache is
        flushed (unless ``flush_cache`` is false)."""
        model_path = body.get("model_path")
        if not isinstance(model_path, str) or not model_path:
            await _send(writer, 422, {"detail": [{"loc": ["body", "model_path"],
                                                  "msg": "Field required"}]})  # fmt: skip
            return
        if body.get("abort_all_requests"):
            self.scheduler.abort("", True)
        await poll_until(lambda: not self.scheduler.in_flight, timeout_s=3600, what="idle")
        if not await asyncio.to_thread(os.path.exists, model_path):
            message = f"Failed to load weights: {model_path}"
            await _send(writer, 400, {"success": False, "num_paused_requests": 0,
                                      "message": message})  # fmt: skip
            return
        self.config.model_path = model_path
        self.scheduler.weights += 1
        if body.get("flush_cache", True):
            self.scheduler.tree.clear()
        self.weight_updates.append(body)
        await _send(writer, 200, {"success": True, "num_paused_requests": 0,
                                  "message": "Succeeded to update model weights."})  # fmt: skip

    async def _generate(self, body: Any, writer: asyncio.StreamWriter) -> bool:
        if self._fail:
            await _send(writer, self._fail.pop(0), {"detail": "injected failure"})
            return True
        req, stream = parse_generate(body, self.config, self.scheduler.num_arrivals)
        self.scheduler.num_arrivals += 1
        self.scheduler.submit(req)
        self.bodies.append(body)
        self.routing_keys.append(self._routing_key)
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
        # Like SGLang, cached tokens nobody holds count as free (they are evictable).
        used, now = s.used_tokens - s.tree.evictable_tokens, time.monotonic()
        load = {
            "dp_rank": 0, "timestamp": time.time(), "num_running_reqs": len(s.running),
            "num_waiting_reqs": len(s.waiting), "num_used_tokens": used,
            "max_total_num_tokens": self.config.max_total_num_tokens,
            "token_usage": used / self.config.max_total_num_tokens,
            "gen_throughput": s.gen_throughput(now), "cache_hit_rate": s.cache_hit_rate,
            "utilization": len(s.running) / self.config.max_running,
            "max_running_requests": self.config.max_running,
        }  # fmt: skip
        return {"timestamp": "", "version": "0.5.23-double", "accelerator": None,
                "num_accelerators": self.config.tp_size, "loads": [load]}  # fmt: skip

    def _server_info(self) -> dict[str, Any]:
        return {
            "model_path": self.config.model_path, "served_model_name": self.config.model_path,
            "tp_size": self.config.tp_size, "dp_size": 1, "page_size": self.config.page_size,
            "max_running_requests": self.config.max_running,
            "max_total_num_tokens": self.config.max_total_num_tokens,
            "context_length": self.config.context_length,
            "enable_priority_scheduling": self.config.priority_scheduling,
            "schedule_policy": "fcfs",
            "abort_on_priority_when_disabled": self.config.abort_on_priority_when_disabled,
            "schedule_low_priority_values_first": self.config.schedule_low_priority_values_first,
            "priority_scheduling_preemption_threshold": self.config.preemption_threshold,
            "radix_eviction_policy": self.config.radix_eviction_policy,
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """SGLang's own flags for what the double models; any other flag fails, as in SGLang."""
    parser = argparse.ArgumentParser(description="SGLang protocol double (tests only)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model-path", default="heddle/sglang-double")
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--base-gpu-id", type=int, default=0)
    parser.add_argument("--enable-priority-scheduling", action="store_true")
    parser.add_argument("--abort-on-priority-when-disabled", action="store_true")
    parser.add_argument("--schedule-low-priority-values-first", action="store_true")
    parser.add_argument("--schedule-policy", default="fcfs", choices=["fcfs", "lof", "lpm"])
    parser.add_argument("--priority-scheduling-preemption-threshold", type=int, default=10)
    parser.add_argument("--radix-eviction-policy", default="lru", choices=["lru"])
    parser.add_argument("--page-size", type=int, default=1, choices=[1])
    parser.add_argument("--max-running-requests", type=int, default=4)
    parser.add_argument("--max-total-tokens", type=int, default=200_000)
    # The double's own knobs (SGLang has no such flags).
    parser.add_argument("--tokens-per-s", type=float, default=500.0)
    parser.add_argument("--vocab-size", type=int, default=1000, help="259: byte-tokenizer ids")
    parser.add_argument("--startup-delay-s", type=float, default=0.0)
    parser.add_argument("--exit-after-s", type=float, default=0.0, help="crash after (0: never)")
    args = parser.parse_args(argv)
    if args.enable_priority_scheduling and args.schedule_policy not in ("fcfs", "lof"):
        parser.error("priority scheduling needs --schedule-policy fcfs or lof")  # as SGLang
    return args


def config_of(args: argparse.Namespace) -> DoubleConfig:
    return DoubleConfig(
        tokens_per_s=args.tokens_per_s,
        vocab_size=args.vocab_size,
        max_running=args.max_running_requests,
        max_total_num_tokens=args.max_total_tokens,
        priority_scheduling=args.enable_priority_scheduling,
        abort_on_priority_when_disabled=args.abort_on_priority_when_disabled,
        schedule_low_priority_values_first=args.schedule_low_priority_values_first,
        preemption_threshold=args.priority_scheduling_preemption_threshold,
        radix_eviction_policy=args.radix_eviction_policy,
        page_size=args.page_size,
        startup_delay_s=args.startup_delay_s,
        model_path=args.model_path,
        tp_size=args.tp_size,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.exit_after_s > 0:
        threading.Timer(args.exit_after_s, lambda: os._exit(17)).start()
    asyncio.run(SglangDouble(config_of(args), port=args.port).serve())


if __name__ == "__main__":
    main()
