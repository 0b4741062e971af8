"""The simulated tool executors: an elastic pool of warm executors with cold starts."""

from __future__ import annotations


class ToolPool:
    """Elastic executors: warm ones start at once, a call finding none pays a cold start and
    leaves one more warm executor behind (None: always warm)."""

    def __init__(self, num_warm: int | None, cold_start_s: float) -> None:
        self._idle = num_warm
        self._cold_start_s = cold_start_s

    def acquire(self) -> float:
        """Seconds of cold start this call pays."""
        if self._idle is None:
            return 0.0
        if self._idle > 0:
            self._idle -= 1
            return 0.0
        return self._cold_start_s

    def release(self) -> None:
        if self._idle is not None:
            self._idle += 1
