"""Generation through an ``sglang-router`` (the router slime launches) instead of one server.

With ``--router-url`` the engine still owns one server (readiness, capacity, load) but posts
every ``/generate`` to the router, which picks the server (``cache_aware`` and the other
policies of PyPI ``sglang-router``). The router (0.3.2) does not route ``/abort_request``
(404), so an abort goes to every server the router lists (``GET /workers``): rids are unique
per engine, so no other engine's request matches.
"""

from __future__ import annotations

import asyncio

from heddle.workers.engines.sglang.client import SglangClient


class RouterTarget:
    """The router's client for generation and the per-server clients for aborts."""

    def __init__(self, router: SglangClient) -> None:
        self.router = router
        self._servers: dict[str, SglangClient] = {}

    @property
    def url(self) -> str:
        return self.router.base_url

    async def abort(self, rid: str) -> None:
        """Abort ``rid`` on every server behind the router (raises ``EngineError``)."""
        if not self._servers:
            for url in await self.router.router_workers():
                self._servers[url] = SglangClient(
                    url, timeouts=self.router.timeouts, retry=self.router.retry
                )
        await asyncio.gather(*(server.abort(rid) for server in self._servers.values()))

    async def close(self) -> None:
        await asyncio.gather(
            self.router.close(), *(server.close() for server in self._servers.values())
        )
