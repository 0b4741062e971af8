"""Stub SGLang workers and a real ``sglang-router`` process on loopback, for agreement tests.

A stub answers every GET the router polls at start (health, server and model info) and holds
each ``/generate`` open until the test releases it, so the test controls the in-flight load the
router counts. Each stub records which request (by ``rid``) reached it.
"""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOOPBACK = "127.0.0.1"
_LAUNCH = """
import sys
from sglang_router.launch_router import launch_router, parse_router_args
args = parse_router_args(sys.argv[2:])
args.policy = sys.argv[1]  # the CLI's choices omit consistent_hashing; the bindings take it
launch_router(args)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


class StubWorker:
    """One fake worker: ``arrivals`` yields (rid, name) as requests reach it."""

    def __init__(self, name: str, arrivals: queue.Queue[tuple[str, str]]) -> None:
        self.name = name
        self._releases: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return None  # the router probes with non-HTTP/1 bytes at start: ignore

            def _reply(self, payload: object) -> None:
                body = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._reply(
                    {"model_path": "stub", "served_model_name": "stub", "is_generation": True}
                )

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                rid = str(body.get("rid", ""))
                release = stub.release_event(rid)
                arrivals.put((rid, stub.name))
                release.wait(timeout=60)
                self._reply({"text": stub.name, "meta_info": {"id": rid}})

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://{LOOPBACK}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def release_event(self, rid: str) -> threading.Event:
        with self._lock:
            return self._releases.setdefault(rid, threading.Event())

    def release_all(self) -> None:
        with self._lock:
            for event in self._releases.values():
                event.set()

    def close(self) -> None:
        self.release_all()
        self._server.shutdown()
        self._server.server_close()


class RouterClient:
    """Sends requests through the router, one thread each, and learns where each went."""

    def __init__(
        self,
        router_url: str,
        workers: list[StubWorker],
        arrivals: queue.Queue[tuple[str, str]],
    ) -> None:
        self._url = router_url
        self._workers = {worker.name: worker for worker in workers}
        self.arrivals = arrivals
        self._worker_of: dict[str, str] = {}
        self._threads: dict[str, threading.Thread] = {}

    def send(
        self, rid: str, text: str, routing_key: str | None = None, *, as_ids: bool = False
    ) -> str:
        """Post the request and wait until a stub holds it: the stub's name. ``as_ids``: send
        the text as ``input_ids`` (one id per character, its code point), as slime does."""
        prompt: dict[str, object] = (
            {"input_ids": [ord(c) for c in text]} if as_ids else {"text": text}
        )
        body = json.dumps({**prompt, "rid": rid, "sampling_params": {"max_new_tokens": 1}})
        headers = {"Content-Type": "application/json"}
        if routing_key is not None:
            headers["X-SMG-Routing-Key"] = routing_key
        request = urllib.request.Request(
            f"{self._url}/generate", body.encode(), headers, method="POST"
        )
        thread = threading.Thread(target=_post, args=(request,), daemon=True)
        thread.start()
        self._threads[rid] = thread
        arrived_rid, name = self.arrivals.get(timeout=20)
        assert arrived_rid == rid, f"expected {rid}, {arrived_rid} arrived"
        self._worker_of[rid] = name
        return name

    def release(self, rids: list[str] | tuple[str, ...]) -> None:
        """Let these requests finish and wait until their responses are back."""
        for rid in rids:
            self._workers[self._worker_of[rid]].release_event(rid).set()
        for rid in rids:
            self._threads.pop(rid).join(timeout=20)

    def listed_urls(self) -> list[str]:
        """The workers in the order ``GET /workers`` lists them (the registry's map order)."""
        with urllib.request.urlopen(f"{self._url}/workers", timeout=5) as response:
            return [w["url"] for w in json.loads(response.read())["workers"]]

    def wait_loads(self, expected: dict[str, int]) -> None:
        """Wait until the router's own in-flight counts (``GET /workers``) are ``expected``
        (by worker URL): it drops a request's load guard only once the body is forwarded."""
        deadline = time.monotonic() + 10
        loads: dict[str, int] = {}
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"{self._url}/workers", timeout=5) as response:
                listing = json.loads(response.read())
            loads = {w["url"]: int(w.get("load", 0)) for w in listing["workers"]}
            if all(loads.get(url, 0) == n for url, n in expected.items()):
                return
            time.sleep(0.01)
        raise AssertionError(f"router loads {loads}, expected {expected}")


def _post(request: urllib.request.Request) -> None:
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


@contextmanager
def running_router(policy: str, workers: list[StubWorker], *flags: str) -> Iterator[str]:
    """A real router over ``workers`` on a free loopback port; always terminated."""
    port, metrics_port = free_port(), free_port()
    command = [
        sys.executable,
        "-c",
        _LAUNCH,
        policy,
        "--worker-urls",
        *[worker.url for worker in workers],
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--prometheus-host",
        LOOPBACK,
        "--prometheus-port",
        str(metrics_port),
        "--disable-health-check",
        "--disable-retries",
        "--disable-circuit-breaker",
        "--log-level",
        "warn",
        *flags,
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://{LOOPBACK}:{port}"
    try:
        _wait_ready(url, len(workers), process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _wait_ready(url: str, num_workers: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120  # a loaded machine starts the router slowly
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stderr = process.stderr.read().decode() if process.stderr else ""
            raise RuntimeError(f"router exited with {process.returncode}: {stderr[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/workers", timeout=2) as response:
                listing = json.loads(response.read())
            if _num_healthy(listing) >= num_workers:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("router did not register its workers within 120 s")


def _num_healthy(listing: object) -> int:
    workers = listing.get("workers", []) if isinstance(listing, dict) else listing
    if not isinstance(workers, list):
        return 0
    return sum(1 for w in workers if isinstance(w, dict) and w.get("is_healthy", True))
