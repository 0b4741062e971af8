"""Serving a registry over HTTP for Prometheus to scrape (``GET /metrics``).

Convention for every long-lived command: ``--metrics-port PORT``, where 0 (the default) serves
nothing. The server runs in a daemon thread (prometheus-client's WSGI server), so it answers
even while the process's event loop is busy.
"""

from __future__ import annotations

from dataclasses import dataclass
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from heddle.errors import UserError

DEFAULT_METRICS_HOST = "0.0.0.0"
METRICS_PORT_HELP = "Serve Prometheus metrics on this port (0: off)"


@dataclass(slots=True)
class MetricsServer:
    """A running metrics endpoint; ``close`` stops it."""

    server: WSGIServer
    thread: Thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    @classmethod
    def start(
        cls, registry: CollectorRegistry, port: int, host: str = DEFAULT_METRICS_HOST
    ) -> MetricsServer:
        """Serve ``registry`` on ``host:port`` (port 0: any free port, see ``port``)."""
        try:
            server, thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise UserError(f"cannot serve metrics on {host}:{port}: {exc.strerror}") from None
        return cls(server, thread)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5.0)


def start_metrics_server(
    port: int, registry: CollectorRegistry, host: str = DEFAULT_METRICS_HOST
) -> MetricsServer | None:
    """The ``--metrics-port`` convention: None (nothing served) for port 0."""
    if port < 0 or port > 65535:
        raise UserError(f"--metrics-port must be 0 (off) or a port number, got {port}")
    if port == 0:
        return None
    return MetricsServer.start(registry, port, host)
