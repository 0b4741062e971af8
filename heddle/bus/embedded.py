"""One embedded ``nats-server`` shared by every Heddle process of a data dir.

The process that starts the server records it in ``<data_dir>/nats.json`` (url, server pid,
starter pid). Another process with the same data dir connects to that URL when the pid is alive
and the server answers; otherwise it starts its own server and replaces the stale record. A file
lock around check-and-start stops two processes from starting two servers on one store.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from heddle.bus.server import EmbeddedNatsServer

RECORD_NAME = "nats.json"
_LOCK_NAME = "nats.lock"


class ServerRecord(msgspec.Struct, frozen=True):
    url: str
    pid: int
    """The nats-server process."""
    owner_pid: int = 0
    """The Heddle process that started it."""


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
        server = EmbeddedNatsServer(store_dir).start()
        assert server.pid is not None
        _write_record(record_path, ServerRecord(server.url, server.pid, os.getpid()))
        return SharedServer(server.url, record_path, server)


def release_embedded_server(shared: SharedServer) -> None:
    """Stop the server if this process started it, and remove its record."""
    if shared.server is None:
        return
    with _locked(shared.record_path.parent / _LOCK_NAME):
        record = read_record(shared.record_path)
        if record is not None and record.pid == shared.server.pid:
            shared.record_path.unlink(missing_ok=True)
        shared.server.stop()


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
