"""A JetStream cluster of ``nats-server`` processes on loopback (tests and ``heddle bench
cluster``): the same binary as ``EmbeddedNatsServer``, each node with its own store, client,
route and monitoring ports, routes to every other node.

A node SIGKILLed with ``kill(index)`` restarts on the same ports and store with
``restart(index)``, as an operator's supervisor would; ``start()`` and ``restart()`` return when
every running node answers ``/healthz`` (JetStream current, a meta leader elected).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from heddle.bus.server import MAX_PAYLOAD_BYTES, find_nats_server, free_port, stop_process

CLUSTER_NAME = "heddle"


@dataclass(frozen=True, slots=True)
class NodePorts:
    client: int
    route: int
    monitor: int


def node_config(name: str, ports: NodePorts, store_dir: Path, routes: list[int], extra: str) -> str:
    """The nats-server configuration of one node (``extra``: appended verbatim, e.g. TLS)."""
    route_urls = ", ".join(f'"nats-route://127.0.0.1:{port}"' for port in routes)
    return (
        f'server_name: "{name}"\n'
        f'listen: "127.0.0.1:{ports.client}"\n'
        f'http: "127.0.0.1:{ports.monitor}"\n'
        f"max_payload: {MAX_PAYLOAD_BYTES}\n"
        f'jetstream {{ store_dir: "{store_dir}" }}\n'
        f'cluster {{ name: "{CLUSTER_NAME}", listen: "127.0.0.1:{ports.route}", '
        f"routes: [{route_urls}] }}\n"
        f"{extra}"
    )


class LoopbackCluster:
    """``num_nodes`` clustered ``nats-server`` processes; a context manager."""

    def __init__(self, root: Path, num_nodes: int = 3, extra_config: str = "") -> None:
        self.root = Path(root)
        self.names = [f"n{index + 1}" for index in range(num_nodes)]
        self.ports = [NodePorts(free_port(), free_port(), free_port()) for _ in self.names]
        self.extra_config = extra_config
        self._processes: list[subprocess.Popen[bytes] | None] = [None] * num_nodes

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what ``HEDDLE_NATS_URL`` takes)."""
        return ",".join(self.node_url(index) for index in range(len(self.names)))

    def node_url(self, index: int) -> str:
        return f"nats://127.0.0.1:{self.ports[index].client}"

    def index_of(self, server_name: str) -> int:
        return self.names.index(server_name)

    def is_running(self, index: int) -> bool:
        process = self._processes[index]
        return process is not None and process.poll() is None

    def start(self, timeout_s: float = 30.0) -> LoopbackCluster:
        for index in range(len(self.names)):
            self._spawn(index)
        self.wait_healthy(timeout_s)
        return self

    def _spawn(self, index: int) -> None:
        folder = self.root / self.names[index]
        folder.mkdir(parents=True, exist_ok=True)
        routes = [ports.route for other, ports in enumerate(self.ports) if other != index]
        config = folder / "nats-server.conf"
        name, ports = self.names[index], self.ports[index]
        config.write_text(node_config(name, ports, folder / "js", routes, self.extra_config))
        with (folder / "nats-server.log").open("ab") as log:
            self._processes[index] = subprocess.Popen(
                [str(find_nats_server()), "-c", str(config)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        """Until every running node reports JetStream healthy; ``TimeoutError`` otherwise."""
        deadline = time.monotonic() + timeout_s
        pending = [index for index in range(len(self.names)) if self.is_running(index)]
        while pending and time.monotonic() < deadline:
            for index in list(pending):
                self._check_alive(index)
                if self._healthy(index):
                    pending.remove(index)
            if pending:
                time.sleep(0.05)
        if pending:
            names = ", ".join(self.names[index] for index in pending)
            raise TimeoutError(f"cluster nodes {names} not healthy within {timeout_s:g} s")

    def _healthy(self, index: int) -> bool:
        url = f"http://127.0.0.1:{self.ports[index].monitor}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                return bool(json.load(response).get("status") == "ok")
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def _check_alive(self, index: int) -> None:
        process = self._processes[index]
        if process is not None and process.poll() is not None:
            log = (self.root / self.names[index] / "nats-server.log").read_text(errors="replace")
            raise RuntimeError(f"node {self.names[index]} exited: {log[-2000:]}")

    def kill(self, index: int) -> None:
        """SIGKILL one node (no shutdown: what a crashed host looks like)."""
        process, self._processes[index] = self._processes[index], None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self, index: int, timeout_s: float = 30.0) -> None:
        """Start a killed node again on its ports and store, and wait until it is healthy."""
        if self.is_running(index):
            raise RuntimeError(f"node {self.names[index]} is running")
        self._spawn(index)
        self.wait_healthy(timeout_s)

    def stop(self) -> None:
        for index, process in enumerate(self._processes):
            if process is not None:
                stop_process(process)
            self._processes[index] = None

    def __enter__(self) -> LoopbackCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
