"""One embedded ``nats-server`` shared by every Heddle process of a data dir.

The process that starts the server records it in ``<data_dir>/nats.json`` (url, server pid,
starter pid, monitoring port). Another process with the same data dir connects to that URL when
the pid is alive and the server answers; otherwise it starts its own server and replaces the
stale record. A file lock around check-and-start stops two processes from starting two servers
on one store.

On close, the starter stops the server, unless other clients are still connected (the server's
``/varz`` says so): a short-lived command that happened to start it must not cut off the workers
that joined meanwhile. The server then keeps running, and the last process to leave it (the
starter gone, no client left) stops it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from heddle.bus.server import EmbeddedNatsServer

log = logging.getLogger(__name__)

RECORD_NAME = "nats.json"
_LOCK_NAME = "nats.lock"


class ServerRecord(msgspec.Struct, frozen=True):
    url: str
    pid: int
    """The nats-server process."""
    owner_pid: int = 0
    """The Heddle process that started it (0: it left while others still used the server,
    so the last of them stops it)."""
    monitor_port: int = 0
    """HTTP monitoring port (0: unknown, as in records of older versions)."""


@dataclass(frozen=True, slots=True)
class SharedServer:
    """The embedded server a process uses; ``server`` is set when this process started it."""

    url: str
    record_path: Path
    server: EmbeddedNatsServer | None = None

    @property
    def is_owner(self) -> bool:
        return self.server is not None


def acquire_embedded_server(data_dir: Path, store_dir: Path) -> SharedServer:
    """The data dir's running embedded server, or a new one recorded for the others."""
    data_dir.mkdir(parents=True, exist_ok=True)
    record_path = data_dir / RECORD_NAME
    with _locked(data_dir / _LOCK_NAME):
        record = read_record(record_path)
        if record is not None and is_alive(record.pid) and answers(record.url):
            return SharedServer(record.url, record_path)
        server = EmbeddedNatsServer(store_dir, monitor_port=0).start()
        assert server.pid is not None and server.monitor_port is not None
        record = ServerRecord(server.url, server.pid, os.getpid(), server.monitor_port)
        _write_record(record_path, record)
        return SharedServer(server.url, record_path, server)


def release_embedded_server(shared: SharedServer) -> None:
    """Leave the shared server (after this process closed its connection): stop it when this
    process started it or its starter is gone, unless other clients still use it."""
    with _locked(shared.record_path.parent / _LOCK_NAME):
        record = read_record(shared.record_path)
        if record is None or record.url != shared.url:
            if shared.server is not None:
                shared.server.stop()
            return
        if record.monitor_port and _has_clients(record.monitor_port):
            if shared.server is not None:
                log.info("embedded nats-server %s still has clients: left running", record.url)
                abandoned = msgspec.structs.replace(record, owner_pid=0)
                _write_record(shared.record_path, abandoned)
            return
        if shared.server is not None:
            shared.server.stop()
        elif record.monitor_port and (record.owner_pid == 0 or not is_alive(record.owner_pid)):
            _terminate(record.pid)
        else:
            return
        shared.record_path.unlink(missing_ok=True)


def restart_embedded_server(shared: SharedServer, down_s: float) -> None:
    """Stop the server this process started, wait ``down_s``, start it again on the same port
    and store, and record its new pid (an operator's restart, for fault benchmarks)."""
    if shared.server is None:
        raise RuntimeError("only the process that started the embedded server restarts it")
    # Under the data dir's lock throughout: a process that starts meanwhile would otherwise
    # find the recorded server dead and start a second one on the same store.
    with _locked(shared.record_path.parent / _LOCK_NAME):
        shared.server.restart(down_s)
        pid = shared.server.pid
        assert pid is not None
        record = read_record(shared.record_path)
        if record is not None:
            _write_record(shared.record_path, msgspec.structs.replace(record, pid=pid))


def read_record(path: Path) -> ServerRecord | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=ServerRecord)
    except (OSError, msgspec.DecodeError):
        return None


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def answers(url: str, timeout_s: float = 1.0) -> bool:
    """Whether a NATS server greets us (``INFO ...``) at ``url`` (``nats://host:port``)."""
    host, _, port = url.removeprefix("nats://").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            return sock.recv(4).startswith(b"INFO")
    except (OSError, ValueError):
        return False


def _has_clients(monitor_port: int, settle_s: float = 0.5) -> bool:
    """Whether the server counts client connections; a connection that just closed may take a
    moment to disappear, so a non-zero count is re-checked until ``settle_s``."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            url = f"http://127.0.0.1:{monitor_port}/varz"
            with urllib.request.urlopen(url, timeout=1.0) as response:
                num_connections = int(json.load(response).get("connections", 0))
        except (OSError, ValueError):
            return False
        if num_connections == 0 or time.monotonic() >= deadline:
            return num_connections > 0
        time.sleep(0.05)


def _terminate(pid: int, timeout_s: float = 10.0) -> None:
    """Stop a server this process did not start (its starter is gone)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while is_alive(pid) and not _is_zombie(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _write_record(path: Path, record: ServerRecord) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(msgspec.json.encode(record))
    temporary.replace(path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
