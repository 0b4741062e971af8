"""A pre-warmed pool of sandbox processes that scales with demand within [min_warm, max_procs].

Processes are spawned ahead of calls and parked (interpreter started, namespaces and mounts set
up, blocked on stdin), so a call pays only the hand-off. Each process runs exactly one call and
is discarded (nothing leaks between calls); a background task refills the pool, at most
``max_concurrent_spawns`` start-ups at once. At most ``max_procs`` calls run at once and
parked + running processes never exceed ``max_procs``. The owner reports demand
(``set_demand``: calls waiting in its queue) and the pool keeps ``clamp(demand, min_warm,
max_procs - running)`` processes parked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass
from types import TracebackType

from heddle.workers.tools.isolation import Isolation, UidAllocator
from heddle.workers.tools.limits import SandboxConfig
from heddle.workers.tools.sandbox import (
    SandboxBroken,
    SandboxError,
    SandboxProcess,
    SandboxRequest,
    SandboxResult,
)
from heddle.workers.tools.sandbox_calls import resolve_isolation

_SPAWN_RETRY_S = 1.0
"""Pause after a failed spawn before the pool tries again."""


@dataclass(frozen=True, slots=True)
class PoolStats:
    num_parked: int
    num_running: int
    target_parked: int
    num_warm_starts: int
    """Calls served by a parked process."""
    num_cold_starts: int
    """Calls that had to spawn their process (pool empty)."""
    num_spawn_failures: int


class SandboxPool:
    """Pre-warmed sandbox processes; use ``async with SandboxPool(...) as pool``."""

    def __init__(
        self,
        config: SandboxConfig,
        *,
        min_warm: int = 2,
        max_procs: int = 8,
        max_concurrent_spawns: int = 2,
    ) -> None:
        if max_procs < 1 or not 0 <= min_warm <= max_procs:
            raise ValueError(
                f"need 0 <= min_warm <= max_procs and max_procs >= 1, got "
                f"min_warm={min_warm}, max_procs={max_procs}"
            )
        self.config = config
        self.min_warm = min_warm
        self.max_procs = max_procs
        self.max_concurrent_spawns = max(1, max_concurrent_spawns)
        self._isolation: Isolation | None = None
        self._uids = UidAllocator(config.uid_base, config.num_uids)
        self._slots = asyncio.Semaphore(max_procs)
        self._parked: deque[SandboxProcess] = deque()
        self._num_running = 0
        self._num_waiting = 0
        self._demand = 0
        self._changed = asyncio.Event()
        self._parked_more = asyncio.Event()
        self._refill_task: asyncio.Task[None] | None = None
        self._num_warm_starts = 0
        self._num_cold_starts = 0
        self._num_spawn_failures = 0

    @property
    def isolation(self) -> Isolation:
        if self._isolation is None:
            raise RuntimeError("the sandbox pool is not started")
        return self._isolation

    @property
    def target_parked(self) -> int:
        wanted = max(self.min_warm, self._demand + self._num_waiting)
        return max(0, min(wanted, self.max_procs - self._num_running))

    def stats(self) -> PoolStats:
        return PoolStats(
            num_parked=len(self._parked),
            num_running=self._num_running,
            target_parked=self.target_parked,
            num_warm_starts=self._num_warm_starts,
            num_cold_starts=self._num_cold_starts,
            num_spawn_failures=self._num_spawn_failures,
        )

    async def start(self) -> SandboxPool:
        """Resolve the isolation (a probe call) and start filling the pool."""
        self._isolation = await resolve_isolation(self.config)
        self._refill_task = asyncio.create_task(self._refill_loop(), name="sandbox-pool-refill")
        self._changed.set()
        return self

    async def close(self) -> None:
        if self._refill_task is not None:
            self._refill_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refill_task
        while self._parked:
            await self._parked.popleft().discard()

    async def __aenter__(self) -> SandboxPool:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def wait_until_parked(self, num_parked: int, timeout_s: float = 60.0) -> bool:
        """Wait until at least ``num_parked`` processes are parked; False if ``timeout_s``
        passed first (the target may be lower, or spawning fails)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(self._parked) < num_parked:
            self._parked_more.clear()
            remaining_s = deadline - asyncio.get_running_loop().time()
            try:
                await asyncio.wait_for(self._parked_more.wait(), max(remaining_s, 0.0))
            except TimeoutError:
                return False
        return True

    def set_demand(self, num_queued: int) -> None:
        """Calls known to be waiting upstream (e.g. the tool queue's pending messages)."""
        self._demand = max(0, num_queued)
        self._changed.set()

    async def run(self, request: SandboxRequest) -> SandboxResult:
        """Run one call in its own process, a parked one when available."""
        self._num_waiting += 1
        self._changed.set()
        async with self._slots:
            self._num_waiting -= 1
            self._num_running += 1
            try:
                return await self._run_in_fresh_process(request)
            finally:
                self._num_running -= 1
                self._changed.set()

    async def _run_in_fresh_process(self, request: SandboxRequest) -> SandboxResult:
        uid = self._uids.allocate() if self.isolation.drops_privileges else None
        try:
            try:
                return await (await self._take()).run(request, self.config.limits, uid)
            except SandboxBroken:
                # A parked process died (e.g. killed by an operator): one fresh try.
                return await (await self._spawn_cold()).run(request, self.config.limits, uid)
        finally:
            if uid is not None:
                self._uids.release(uid)

    async def _take(self) -> SandboxProcess:
        while self._parked:
            process = self._parked.popleft()
            if process.is_alive:
                self._num_warm_starts += 1
                return process
            await process.discard()
        return await self._spawn_cold()

    async def _spawn_cold(self) -> SandboxProcess:
        self._num_cold_starts += 1
        return await SandboxProcess.spawn(self.isolation, self.config)

    async def _refill_loop(self) -> None:
        """Keep ``target_parked`` processes parked, spawning at most ``max_concurrent_spawns``
        at once (start-up is CPU bound: more in parallel would only slow the running calls)."""
        spawning: set[asyncio.Task[None]] = set()
        try:
            while True:
                await self._changed.wait()
                self._changed.clear()
                while len(self._parked) > self.target_parked:
                    await self._parked.pop().discard()
                while (
                    len(self._parked) + len(spawning) < self.target_parked
                    and len(spawning) < self.max_concurrent_spawns
                ):
                    task = asyncio.create_task(self._spawn_parked())
                    spawning.add(task)
                    task.add_done_callback(spawning.discard)
        finally:
            for task in spawning:
                task.cancel()
            await asyncio.gather(*spawning, return_exceptions=True)

    async def _spawn_parked(self) -> None:
        try:
            process = await SandboxProcess.spawn(self.isolation, self.config)
        except SandboxError:
            self._num_spawn_failures += 1
            await asyncio.sleep(_SPAWN_RETRY_S)
        else:
            self._parked.append(process)
            self._parked_more.set()
        finally:
            self._changed.set()
