"""Trace replay tool: wait the recorded tool time (scaled), return deterministic pseudo-tokens.

Pseudo-token ids lie in ``[0, 256)``: valid ids of every tokenizer (the byte tokenizer included),
so a replayed observation can be appended to any engine's context.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable

from heddle.events.commands import TraceTool

PSEUDO_TOKEN_ID_LIMIT = 256


def pseudo_token_ids(seed: int, num_tokens: int) -> list[int]:
    """``num_tokens`` ids drawn from ``seed`` alone: the same seed always gives the same ids."""
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    return list(random.Random(seed).randbytes(num_tokens))


def trace_wait_s(request: TraceTool, time_scale: float) -> float:
    """Wall seconds a trace tool waits: the recorded model time divided by the time scale."""
    if not math.isfinite(request.duration_s) or request.duration_s < 0:
        raise ValueError(
            f"trace tool duration_s must be a finite number >= 0, got {request.duration_s}"
        )
    if not math.isfinite(time_scale) or time_scale <= 0:
        raise ValueError(f"time_scale must be a finite number > 0, got {time_scale}")
    return request.duration_s / time_scale


async def run_trace_tool(
    request: TraceTool,
    time_scale: float,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> list[int]:
    """Wait the scaled tool time, then return the call's pseudo-token observation."""
    wait_s = trace_wait_s(request, time_scale)
    token_ids = pseudo_token_ids(request.seed, request.num_output_tokens)
    await sleep(wait_s)
    return token_ids
