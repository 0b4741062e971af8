"""Supervision of the control plane's units: a unit that fails is rebuilt (called again) after
a pause that doubles from 0.5 s up to ``MAX_BACKOFF_S``, the same recovery as a process restart
without one. A unit that returns is done; cancellation propagates; a failure while stopping
ends supervision quietly."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 10.0


async def supervise(
    name: str,
    unit: Callable[[], Awaitable[None]],
    is_stopping: Callable[[], bool],
    restarts: dict[str, int],
    recovery: str = "rebuilding it from the stream",
) -> None:
    """Run ``unit`` until it returns or ``is_stopping()``; count each rebuild in ``restarts``.
    ``recovery`` says in the log what calling the unit again does."""
    backoff_s = 0.5
    while not is_stopping():
        try:
            await unit()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            if is_stopping():
                return
            log.exception("control plane: %s failed; %s in %.1f s", name, recovery, backoff_s)
            restarts[name] = restarts.get(name, 0) + 1
            await asyncio.sleep(backoff_s)
            backoff_s = min(MAX_BACKOFF_S, backoff_s * 2)
