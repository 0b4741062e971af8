"""Everything in one process: control plane, worker agents and a tool executor on one event loop.

For notebooks, examples and tests that want a whole Heddle without child processes::

    async with InProcessDeployment(settings, num_workers=2, engine_options={"time_scale": "100"}):
        async with HeddleClient(settings) as client:
            rollout_id = await client.submit(trace=trace, time_scale=100)
            ...

It is the same control plane service (``heddle.controlplane``), worker agents
(``heddle.workers.agent``) and tool executor (``heddle.workers.tools``) that ``heddle up`` and
``heddle rollout run`` start as processes; only crash isolation differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from heddle.bus import Bus, BusOptions
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, ControlPlaneService
from heddle.rollout.trainer_records import TRAINER_RECORDS
from heddle.workers.agent.config import WorkerConfig
from heddle.workers.agent.transport import run_agents
from heddle.workers.engines import create_engine
from heddle.workers.environments import validate_task
from heddle.workers.tools.executor import ExecutorConfig, ToolExecutor

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InProcessOptions:
    num_workers: int = 2
    engine: str = "sim"
    engine_options: Mapping[str, str] = field(default_factory=dict)
    heartbeat_s: float = 0.5
    control_plane: ControlPlaneConfig = field(default_factory=ControlPlaneConfig)
    ready_timeout_s: float = 60.0
    stop_timeout_s: float = 30.0
    """How long each part (workers and tools, then the control plane) may take to stop once
    asked; what is still running then is cancelled, with a warning that shows where it was
    (everything it acknowledged was committed first, so cancelling loses nothing)."""


class InProcessDeployment:
    def __init__(self, settings: Settings, options: InProcessOptions | None = None) -> None:
        self.settings = settings
        self.options = options or InProcessOptions()
        self.service = ControlPlaneService(
            settings,
            self.options.control_plane,
            check_task=validate_task,
            trainer_records=TRAINER_RECORDS,
        )
        self._stop_control = asyncio.Event()
        self._stop_workers = asyncio.Event()
        self._tasks: list[asyncio.Task[object]] = []
        self._bus: Bus | None = None
        self._executor: ToolExecutor | None = None

    @property
    def worker_ids(self) -> list[str]:
        return [f"w{index:02d}" for index in range(self.options.num_workers)]

    async def __aenter__(self) -> InProcessDeployment:
        options = self.options
        # The first bus holds the embedded server (if any) for everyone else in the process.
        self._bus = await _started(Bus(self.settings, BusOptions(name="heddle-inprocess")))
        self._tasks.append(asyncio.create_task(self.service.run(self._stop_control)))
        async with asyncio.timeout(options.ready_timeout_s):
            await self._ready()
        configs = [
            WorkerConfig(worker_id, engine_name=options.engine, heartbeat_s=options.heartbeat_s)
            for worker_id in self.worker_ids
        ]
        engine_options = dict(options.engine_options)
        self._tasks.append(
            asyncio.create_task(
                run_agents(
                    self.settings,
                    configs,
                    lambda _: create_engine(options.engine, engine_options),
                    self._stop_workers,
                )
            )
        )
        self._executor = ToolExecutor(self._bus, ExecutorConfig(min_warm=0, executor_id="tools00"))
        self._tasks.append(asyncio.create_task(self._executor.run()))
        async with asyncio.timeout(options.ready_timeout_s):
            await self._registered()
        return self

    async def _ready(self) -> None:
        ready = asyncio.create_task(self.service.ready.wait())
        done, _ = await asyncio.wait({ready, self._tasks[0]}, return_when=asyncio.FIRST_COMPLETED)
        if ready not in done:
            ready.cancel()
            self._tasks[0].result()  # the control plane failed: raise why
            raise RuntimeError("the control plane stopped before it was ready")

    async def _registered(self) -> None:
        while True:
            liveness = self.service.liveness
            if liveness is not None and set(self.worker_ids) <= set(liveness.live_workers()):
                return
            await asyncio.sleep(0.05)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop_workers.set()
        if self._executor is not None:
            self._executor.stop()
        await self._stopped(self._tasks[1:], "workers and tools")
        self._stop_control.set()
        await self._stopped(self._tasks[:1], "control plane")
        if self._bus is not None:
            with contextlib.suppress(Exception):
                await self._bus.close()

    async def _stopped(self, tasks: Sequence[asyncio.Task[object]], what: str) -> None:
        """Wait for ``tasks`` to end, cancelling (with a warning) those still running after
        ``stop_timeout_s``."""
        if not tasks:
            return
        _, running = await asyncio.wait(tasks, timeout=self.options.stop_timeout_s)
        if running:
            stacks = io.StringIO()  # every task still pending: the stuck one may be awaited
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task() and not task.done():
                    task.print_stack(file=stacks)
            log.warning(
                "in-process %s did not stop within %g s; cancelling:\n%s",
                what,
                self.options.stop_timeout_s,
                stacks.getvalue(),
            )
            for task in running:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _started(bus: Bus) -> Bus:
    await bus.start()
    return bus
