"""Whether the embedded nats-server's JetStream store takes writes, and the reset that brings a
wedged one back without restarting the server.

What a full disk does (nats-server 2.15, measured on a 16 MiB tmpfs): the write that meets
ENOSPC logs "Filestore [S] Critical write error: ... no space left on device" and "JetStream
stream '$G > S' critical write error"; from then on the stream keeps that error and stores
nothing, even once space is back, and answers no publish (a publisher only sees its
acknowledgement time out). JetStream itself stays enabled: stream and consumer info answer,
consumers deliver what was stored. The server's ``/healthz?details=true`` names the error.

What brings it back (tried on that server): not a stream configuration update, not a reload
of an unchanged configuration (SIGHUP); a reload with JetStream disabled, then one with it
enabled again. That stops JetStream and loads every stream and consumer from disk anew (the
write error is gone with the old in-memory stream; stored messages and consumer positions stay,
as nothing acknowledged was lost) while client connections stay up. A server whose JetStream
comes from its configuration file (not ``-js`` flags, which override a reload) can be reset so;
the embedded server is started that way (``heddle.bus.server``).

``store_health(monitor_port, store_dir)`` reads ``/healthz`` and the store's free space;
``reset_jetstream(config_path, pid, monitor_port)`` does the reset.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from heddle.bus.server import jetstream_block, write_config

_HTTP_TIMEOUT_S = 2.0
_POLL_S = 0.05


class ResetFailed(RuntimeError):
    """The server did not come back with JetStream enabled and healthy in time."""


@dataclass(frozen=True, slots=True)
class StoreHealth:
    write_error: str
    """The server's words for a stream that refuses writes ('' when none does)."""
    free_bytes: int | None
    """Free space where the store lives (None: not on this machine)."""
    total_bytes: int | None

    @property
    def is_writable(self) -> bool:
        return not self.write_error


def store_health(monitor_port: int, store_dir: Path | None) -> StoreHealth:
    """The server's write errors (``/healthz?details=true``) and the store's free space."""
    free, total = _space(store_dir)
    return StoreHealth(_write_errors(monitor_port), free, total)


def _space(store_dir: Path | None) -> tuple[int | None, int | None]:
    if store_dir is None:
        return None, None
    try:
        stat = os.statvfs(store_dir)
    except OSError:
        return None, None
    return stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize


def _get_json(monitor_port: int, path: str) -> dict[str, object]:
    url = f"http://127.0.0.1:{monitor_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=_HTTP_TIMEOUT_S) as response:
            return dict(json.load(response))
    except urllib.error.HTTPError as error:  # 503 carries the same JSON
        return dict(json.loads(error.read() or b"{}"))


def _write_errors(monitor_port: int) -> str:
    document = _get_json(monitor_port, "/healthz?details=true")
    errors = document.get("errors")
    if not isinstance(errors, list):
        return ""
    found = [
        str(entry.get("error", ""))
        for entry in errors
        if isinstance(entry, dict) and "write error" in str(entry.get("error", ""))
    ]
    return "; ".join(found)


def is_jetstream_disabled(monitor_port: int) -> bool:
    return bool(_get_json(monitor_port, "/jsz").get("disabled"))


def reset_jetstream(
    config_path: Path, store_dir: Path, pid: int, monitor_port: int, timeout_s: float = 30.0
) -> None:
    """Reload the server with JetStream disabled, then enabled: every stream is loaded from
    disk again, without the write error it kept (see the module doc). The configuration file
    is rewritten around its JetStream line; ``ResetFailed`` if it does not come back."""
    text = config_path.read_text()
    prefix = jetstream_block(store_dir, True).removesuffix(" }\n")
    enabled = next((line for line in text.splitlines(True) if line.startswith(prefix)), None)
    if enabled is None:
        raise ResetFailed(f"{config_path} does not configure JetStream as Heddle writes it")
    deadline = time.monotonic() + timeout_s
    try:
        write_config(config_path, text.replace(enabled, jetstream_block(store_dir, False)))
        os.kill(pid, signal.SIGHUP)
        _wait(lambda: is_jetstream_disabled(monitor_port), deadline, "JetStream disabled")
    finally:
        write_config(config_path, text)
        os.kill(pid, signal.SIGHUP)
    _wait(lambda: not is_jetstream_disabled(monitor_port), deadline, "JetStream enabled")
    _wait(lambda: not _write_errors(monitor_port), deadline, "no stream write error")


def _wait(condition: Callable[[], bool], deadline: float, what: str) -> None:
    while True:
        try:
            if condition():
                return
        except OSError:
            pass  # the monitoring endpoint answers again in a moment
        if time.monotonic() > deadline:
            raise ResetFailed(f"nats-server: not {what} in time")
        time.sleep(_POLL_S)
