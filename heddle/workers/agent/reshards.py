"""A worker's part in a re-shard (``heddle.control.reshard`` decides it).

``Retire`` (a member): take no new trajectory and start no new step, interrupt every generation
in flight (the step runner publishes what each produced, ``GenerationInterrupted``, and leaves
the trajectory at rest), close the engine so its GPUs are free, then publish ``WorkerRetired``
naming the successor and the trajectories it held; the worker is done (``retired`` is set, the
process exits). The control plane hands its trajectories to the successor, which rebuilds each
from the stream, interrupted output included.

``Reshard`` (the leader, once the members retired): through the weight gate, hold new
generations, interrupt the running ones (their steps wait at the gate), relaunch the engine at
the new degree over the union of the GPUs (``Resharder.reshard``), register again as a new
incarnation with the new degree, GPUs and capacity, and let the steps go on: each re-prefills
its context on the new engine and generates the rest of its output. The steps of the members'
trajectories, placed here meanwhile, wait at the same gate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from heddle.events import Reshard, Retire, WorkerRegistered
from heddle.events.worker_builders import worker_retired_event
from heddle.workers.agent.commands import CommandHandler
from heddle.workers.agent.generation import STOP_RETRY_S, WeightGate
from heddle.workers.agent.publisher import DurablePublisher
from heddle.workers.agent.steps import StepRunner
from heddle.workers.agent.table import HandedOver, TrajectoryTable
from heddle.workers.engines.base import Engine, EngineError, Resharder

logger = logging.getLogger(__name__)


class Resharding:
    """Carries out ``Retire`` and ``Reshard`` for one worker."""

    def __init__(
        self,
        *,
        worker_id: str,
        engine: Engine,
        gate: WeightGate,
        runner: StepRunner,
        handler: CommandHandler,
        table: TrajectoryTable,
        publisher: DurablePublisher,
        register: Callable[[str], Awaitable[WorkerRegistered]],
        clock: Callable[[], float],
    ) -> None:
        """``register(reason)``: publish a new incarnation's registration."""
        self.worker_id = worker_id
        self.engine = engine
        self.gate = gate
        self.runner = runner
        self.handler = handler
        self.table = table
        self.publisher = publisher
        self.register = register
        self.clock = clock
        self.retired = asyncio.Event()
        """Set once ``WorkerRetired`` is stored: the worker has nothing left to do."""

    async def retire(self, command: Retire) -> None:
        """Leave (see the module docstring); returns once ``WorkerRetired`` is stored."""
        if self.retired.is_set():
            return
        self.handler.segments.is_closing = True  # no new step: commands go back unacknowledged
        self.runner.interruption = f"retire: {command.reshard_id}"
        self.runner.is_leaving = True
        await self._interrupt_running()
        await self.engine.close()
        hosted = [row for row in self.table.hosted()]
        for row in hosted:
            row.stage = HandedOver(command.successor_worker_id)  # later commands go there
        gpu_ids = list(self.engine.gpu_ids) if isinstance(self.engine, Resharder) else []
        await self.publisher.publish(
            worker_retired_event(
                worker_id=self.worker_id,
                reshard_id=command.reshard_id,
                successor_worker_id=command.successor_worker_id,
                trajectory_ids=sorted(row.traj_id for row in hosted),
                gpu_ids=gpu_ids,
                now=self.clock(),
            )
        )
        self.retired.set()

    async def reshard(self, command: Reshard) -> None:
        """Relaunch at the new degree (see the module docstring); returns once registered
        again. ``EngineError`` when the engine cannot (the worker then fails)."""
        engine = self.engine
        if not isinstance(engine, Resharder):
            raise EngineError(f"engine {engine.capabilities.name!r} cannot re-shard")
        self.runner.interruption = f"reshard: {command.reshard_id}"

        async def relaunch() -> None:
            await engine.reshard(command.tp_degree, command.gpu_ids)

        try:
            await self.gate.exclusive(self._abort_running, relaunch)
        finally:
            self.runner.interruption = None
        await self.register(command.reshard_id)

    async def _interrupt_running(self) -> None:
        """Abort every generation in flight and wait until every step rests."""
        await self._abort_running()
        changed = self.handler.segments.changed
        while True:
            changed.clear()  # before the check, so that no change between them is missed
            if not any(row.is_running for row in self.table):
                return
            await self._abort_running()  # a step that began its generation meanwhile
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STOP_RETRY_S):
                    await changed.wait()

    async def _abort_running(self) -> None:
        for row in self.table.generating():
            if row.request_id is not None:
                await self.engine.abort(row.request_id)
