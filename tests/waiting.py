"""Waiting for a condition that background work makes true (a pool's refill, a consumer's
decisions, a sandbox's teardown): polled until it holds, an ``AssertionError`` naming it when it
does not within the time given. A wait, not a timing assertion: the time only bounds a hang."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def until(
    condition: Callable[[], bool] | Callable[[], Awaitable[bool]],
    what: str = "the condition",
    timeout_s: float = 60.0,
    poll_s: float = 0.05,
) -> None:
    """Return once ``condition()`` (sync or async) is true; ``AssertionError`` after
    ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                held = condition()
                if await held if inspect.isawaitable(held) else held:
                    return
                await asyncio.sleep(poll_s)
    except TimeoutError:
        raise AssertionError(f"not within {timeout_s:g} s: {what}") from None
