"""The chaos bench's zombies: a worker paused past its failure, then let run on.

``pause_worker`` SIGSTOPs one running worker process for ``pause_s`` wall seconds and SIGCONTs
it. Paused longer than the control plane's worker timeout, the worker is declared failed and
what it held is placed elsewhere under new hostings; resumed, it finishes the steps it was in
the middle of and publishes them (events of hostings that are over: the gate refuses them, the
worker is fenced and told to rejoin). ``zombie_pause_s`` alternates pauses that end inside
JetStream's 2-minute duplicate window and pauses that end past it (where a retried publish is no
longer recognised by its id): Heddle must hold in both.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal

from heddle.rollout.processes import Child

DUPLICATE_WINDOW_S = 120.0
"""``HEDDLE_EVENTS``' duplicate window (``heddle.bus.streams``)."""
_PAST_FAILURE_S = 3.0
"""How long a short pause outlasts the worker timeout (the failure is declared, its
trajectories placed elsewhere)."""


def zombie_pause_s(index: int, worker_timeout_s: float, long_pause_s: float) -> float:
    """The ``index``-th zombie's pause: past its failure; every second one past the duplicate
    window too (``long_pause_s``; 0: none)."""
    short = worker_timeout_s + _PAST_FAILURE_S
    if index % 2 == 1 and long_pause_s > 0:
        return max(short, long_pause_s)
    return short


async def pause_worker(workers: list[Child], rng: random.Random, pause_s: float) -> str:
    """SIGSTOP a random running worker for ``pause_s``, then SIGCONT it; its name ("" when no
    worker runs)."""
    running = [child for child in workers if child.is_running]
    if not running:
        return ""
    victim = rng.choice(running)
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(pause_s)
    finally:
        if victim.is_running:
            os.kill(victim.pid, signal.SIGCONT)
    return victim.name
