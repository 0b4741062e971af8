"""The real ``sglang-router`` in front of a live rollout's SGLang servers, as slime runs it.

slime sends every generation to the router it launches (PyPI ``sglang-router``, the SGLang
model gateway), which picks the server; a live ``--policy slime`` over SGLang engines does the
same instead of routing through Heddle's model of the router
(``heddle.policy.placement.cache_aware``, the simulator's). ``routed_policy`` names the router
policy of such a bundle:

- ``slime``: ``cache_aware``, the router's default, with its own thresholds.
- ``slime-consistent-hash``: ``consistent_hashing`` on the session, as slime advises for
  multi-turn; the engines send the trajectory id as ``X-SMG-Routing-Key``. The
  ``launch_router`` CLI (0.3.2) omits the policy from its choices while its Python bindings
  take it, so this one is launched through ``launch_router(parse_router_args(...))``.
- ``slime-least-inflight`` keeps the model: it is slime's own Python router
  (``slime/router/router.py``), not ``sglang-router``.

``RouterProcess`` runs ``python -m sglang_router.launch_router --worker-urls ... --policy P``
on a free loopback port, waits until it lists every server healthy (``GET /workers``), reads
how many generations it routed (``smg_router_requests_total`` on its Prometheus port) and
stops it (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from heddle.bus.server import free_port
from heddle.errors import UserError

ROUTED_POLICIES: dict[str, str] = {
    "slime": "cache_aware",
    "slime-consistent-hash": "consistent_hashing",
}
"""Heddle bundle -> the ``sglang-router`` policy a live run over SGLang routes through."""
_LOOPBACK = "127.0.0.1"
_CLI_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "manual")
_BINDINGS_LAUNCH = (
    "import sys; from sglang_router.launch_router import launch_router, parse_router_args; "
    "args = parse_router_args(sys.argv[2:]); args.policy = sys.argv[1]; launch_router(args)"
)
"""``launch_router`` with a policy its CLI's choices omit (the Python bindings take it)."""
_GENERATE_COUNT = re.compile(r'^smg_router_requests_total\{[^}]*endpoint="generate"[^}]*\} (\S+)$')


def routed_policy(policy: str, engine: str) -> str | None:
    """The router policy a live ``policy`` over ``engine`` runs through (None: Heddle routes)."""
    return ROUTED_POLICIES.get(policy) if engine == "sglang" else None


def require_router_package() -> None:
    """``UserError`` naming the package when ``sglang-router`` is not installed."""
    if importlib.util.find_spec("sglang_router") is None:
        raise UserError(
            "a live slime rollout over SGLang routes through the real sglang-router, which is "
            "not installed: pip install 'sglang-router>=0.3.2,<0.4' (a dev extra of heddle)"
        )


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """One ``sglang_router.launch_router`` invocation on loopback."""

    policy: str
    worker_urls: tuple[str, ...]
    port: int
    metrics_port: int
    python: str = sys.executable

    @classmethod
    def on_free_ports(cls, policy: str, worker_urls: tuple[str, ...]) -> RouterSpec:
        return cls(policy, worker_urls, free_port(), free_port())

    @property
    def url(self) -> str:
        return f"http://{_LOOPBACK}:{self.port}"

    def command(self) -> tuple[str, ...]:
        if self.policy in _CLI_POLICIES:
            launch: tuple[str, ...] = ("-m", "sglang_router.launch_router", "--policy", self.policy)
        else:
            launch = ("-c", _BINDINGS_LAUNCH, self.policy)
        return (
            self.python, *launch,
            "--worker-urls", *self.worker_urls,
            "--host", _LOOPBACK, "--port", str(self.port),
            "--prometheus-host", _LOOPBACK, "--prometheus-port", str(self.metrics_port),
            "--log-level", "warn",
        )  # fmt: skip


class RouterProcess:
    """The router as a child process (its output in ``log_path``)."""

    def __init__(self, spec: RouterSpec, log_path: Path) -> None:
        self.spec = spec
        self.log_path = log_path
        self.process: asyncio.subprocess.Process | None = None
        self.num_routed = 0
        """Generations it routed, read when it stops."""

    async def start(self, timeout_s: float = 60.0) -> None:
        """Start it and wait until every server is registered and healthy."""
        require_router_package()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.spec.command(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        await self._wait_ready(timeout_s)

    async def stop(self, grace_s: float = 10.0) -> int | None:
        """Read its routed count, then SIGTERM (SIGKILL after ``grace_s``); its exit code."""
        process = self.process
        if process is None:
            return None
        if process.returncode is None:
            self.num_routed = await self._routed_count()
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                await asyncio.wait_for(process.wait(), grace_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        return process.returncode

    async def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(base_url=self.spec.url, trust_env=False) as http:
            while time.monotonic() < deadline:
                self._check_alive()
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    listing = (await http.get("/workers", timeout=2.0)).json()
                    healthy = [w for w in listing.get("workers", []) if w.get("is_healthy")]
                    if len(healthy) >= len(self.spec.worker_urls):
                        return
                await asyncio.sleep(0.2)
        await self.stop()
        raise UserError(
            f"sglang-router at {self.spec.url} did not register its "
            f"{len(self.spec.worker_urls)} servers within {timeout_s:g} s; log {self.log_path}"
        )

    def _check_alive(self) -> None:
        process = self.process
        if process is not None and process.returncode is not None:
            tail = self.log_path.read_bytes()[-2000:].decode(errors="replace")
            raise UserError(f"sglang-router exited with {process.returncode}:\n{tail}")

    async def _routed_count(self) -> int:
        url = f"http://{_LOOPBACK}:{self.spec.metrics_port}/metrics"
        try:
            async with httpx.AsyncClient(trust_env=False) as http:
                text = (await http.get(url, timeout=5.0)).text
        except httpx.HTTPError:
            return 0
        counts = [_GENERATE_COUNT.match(line) for line in text.splitlines()]
        return int(sum(float(match.group(1)) for match in counts if match))
