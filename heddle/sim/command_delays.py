"""When a command the control plane sends reaches the simulated data plane.

Live, every command travels: the event that causes it is stored in the stream, the control plane
consumes and decides it, the command is stored and the worker takes it. The simulator's deciders
decide at the instant of the event; this module delays each command by a draw from a lognormal
through the configured median and 99th percentile (``SimConfig.control_latency_p50_ms`` and
``control_latency_p99_ms``; their defaults and the measurements behind them are documented
there), the same for every system, since every bundle's deciders (the baselines' routers
included) run in the same control plane. Commands to one worker arrive in the order sent (one
ordered consumer per worker, live): a draw that would overtake an earlier command waits for it.

Deterministic and order-free: a command's draw is a function of the run's seed and the
command's id alone, so a rollout simulated inside a training loop (with weight commands beside
its own) draws the same delays as the same rollout alone.
"""

from __future__ import annotations

import hashlib
import math
from statistics import NormalDist

Z_P99 = NormalDist().inv_cdf(0.99)
"""The standard normal's 99th percentile."""
_UNIT = NormalDist()


class CommandDelays:
    """Arrival times of commands, per worker in order."""

    def __init__(self, p50_ms: float, p99_ms: float, seed: int) -> None:
        if not 0.0 <= p50_ms <= p99_ms or not math.isfinite(p99_ms):
            raise ValueError(f"need 0 <= p50 <= p99 (finite), got {p50_ms} and {p99_ms} ms")
        self._median_s = p50_ms / 1000.0
        self._sigma = math.log(p99_ms / p50_ms) / Z_P99 if p50_ms > 0 else 0.0
        self._salt = f"command-delays:{seed}:".encode()
        self._last_arrival_s: dict[str, float] = {}

    @property
    def is_instant(self) -> bool:
        """Commands arrive when sent (the simulator's behaviour without latency)."""
        return self._median_s == 0.0

    def arrival_s(self, command_id: str, worker_id: str, now: float) -> float:
        """When command ``command_id``, sent to ``worker_id`` at ``now``, arrives."""
        delay_s = self._median_s
        if self._sigma > 0.0:
            delay_s *= math.exp(self._sigma * _UNIT.inv_cdf(self._uniform(command_id)))
        arrival = max(now + delay_s, self._last_arrival_s.get(worker_id, 0.0))
        self._last_arrival_s[worker_id] = arrival
        return arrival

    def _uniform(self, command_id: str) -> float:
        """A draw in (0, 1) from the seed and the id (64 bits of BLAKE2b)."""
        digest = hashlib.blake2b(self._salt + command_id.encode(), digest_size=8).digest()
        return (int.from_bytes(digest, "big") + 0.5) / 2.0**64
