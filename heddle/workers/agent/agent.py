"""The rollout worker agent: one per inference engine.

Lifecycle: ``start`` starts the engine, publishes ``WorkerRegistered`` (with a fresh
incarnation) and starts heartbeats and telemetry. The command transport then calls ``handle``
for each command delivered on ``heddle.cmd.worker.<id>.>``, concurrently, and acknowledges a
command when ``handle`` returns (its effects are stored). ``WorkerFailing`` from ``handle`` means
"do not acknowledge": the engine failed, ``WorkerFailed`` listing the hosted trajectories is
published, and the control plane re-places them (a restarted incarnation that receives the
unacknowledged commands again finds them placed elsewhere and forwards them). ``Drain`` finishes
the hosted trajectories, refuses new ones and publishes ``WorkerDrained``; the agent stays up
(heartbeating) until an ``Undrain`` makes it take trajectories again, or it is stopped.
``LoadWeights`` swaps the engine's weights between generations (``heddle.workers.agent.weights``)
and is acknowledged once ``weights.loaded`` (or ``weights.load_failed``) is stored. ``Retire`` and
``Reshard`` are a re-shard's (``heddle.workers.agent.reshards``): a retired worker sets
``resharding.retired`` and has nothing left to do; a relaunched one registers again.

A worker the control plane declared failed while it still ran (paused past its timeout, cut off)
is a zombie: what it held was placed elsewhere. The control plane tells it with ``Rejoin`` (its
incarnation): it drops every trajectory it holds, publishing nothing more for them, and
registers again as a fresh incarnation, so that work is placed on it again. A ``Fence`` drops one
trajectory whose hosting here is over (``heddle.workers.agent.commands``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections.abc import Callable

from heddle.events import (
    Drain,
    LoadWeights,
    Rejoin,
    Reshard,
    Retire,
    WorkerCommandT,
    WorkerDrained,
    WorkerFailed,
    WorkerRegistered,
)
from heddle.events.worker_builders import worker_registered_event
from heddle.ids import derive_id
from heddle.workers.agent.commands import CommandHandler
from heddle.workers.agent.config import WorkerConfig
from heddle.workers.agent.decisions import TRAJECTORY_COMMANDS, Mode
from heddle.workers.agent.errors import WorkerFailing, WorkerStopping
from heddle.workers.agent.generation import WeightGate
from heddle.workers.agent.migration import Migrator
from heddle.workers.agent.ports import BlobStore, HistorySource, MessageSink, ObjectSource
from heddle.workers.agent.publisher import DurablePublisher
from heddle.workers.agent.reshards import Resharding
from heddle.workers.agent.resume import Resumer
from heddle.workers.agent.steps import StepRunner
from heddle.workers.agent.table import CommandArrival, TrajectoryTable
from heddle.workers.agent.telemetry import Telemetry
from heddle.workers.agent.weights import WeightLoading
from heddle.workers.engines.base import Engine, EngineError, Resharder
from heddle.workers.tokenizers import Tokenizer, load_tokenizer

logger = logging.getLogger(__name__)
_RECANCEL_S = 1.0
"""How long ``close`` gives a cancelled task before cancelling it again."""


class WorkerAgent:
    def __init__(
        self,
        config: WorkerConfig,
        engine: Engine,
        *,
        sink: MessageSink,
        history: HistorySource,
        blobs: BlobStore,
        tokenizer: Tokenizer | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.engine = engine
        self.clock = clock
        self.incarnation = uuid.uuid4().hex[:12]
        self.tokenizer = tokenizer or load_tokenizer(config.tokenizer)
        self.publisher = DurablePublisher(sink, max_retry_s=config.publish_retry_max_s)
        self.table = TrajectoryTable()
        self.weights = WeightGate()
        self.runner = StepRunner(
            worker_id=config.worker_id,
            engine=engine,
            tokenizer=self.tokenizer,
            publisher=self.publisher,
            tool_timeout_s=config.tool_timeout_s,
            clock=clock,
            weights=self.weights,
        )
        self.weight_loading = self._new_weight_loading(blobs)
        self.migrator = Migrator(
            worker_id=config.worker_id,
            engine=engine,
            blobs=blobs,
            publisher=self.publisher,
            runner=self.runner,
        )
        self.handler = self._new_handler(history, blobs)
        self.telemetry = Telemetry(
            worker_id=config.worker_id,
            incarnation=self.incarnation,
            engine=engine,
            table=self.table,
            runner=self.runner,
            publisher=self.publisher,
            clock=clock,
        )
        self.resharding = Resharding(
            worker_id=config.worker_id,
            engine=engine,
            gate=self.weights,
            runner=self.runner,
            handler=self.handler,
            table=self.table,
            publisher=self.publisher,
            register=self._register_again,
            clock=clock,
        )
        self.failed = asyncio.Event()
        self.drained = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []

    def _new_weight_loading(self, blobs: BlobStore) -> WeightLoading:
        return WeightLoading(
            worker_id=self.config.worker_id,
            incarnation=self.incarnation,
            engine=self.engine,
            gate=self.weights,
            publisher=self.publisher,
            objects=blobs if isinstance(blobs, ObjectSource) else None,
            clock=self.clock,
        )

    def _new_handler(self, history: HistorySource, blobs: BlobStore) -> CommandHandler:
        resumer = Resumer(
            worker_id=self.config.worker_id,
            engine=self.engine,
            history=history,
            blobs=blobs,
            decode=self.tokenizer.decode,
            is_engine_held=lambda: self.weights.is_held,
        )
        return CommandHandler(
            worker_id=self.config.worker_id,
            engine=self.engine,
            table=self.table,
            runner=self.runner,
            migrator=self.migrator,
            resumer=resumer,
            publisher=self.publisher,
            worker=self,
            on_engine_failure=self._on_engine_failure,
        )

    @property
    def worker_id(self) -> str:
        return self.config.worker_id

    @property
    def weight_version(self) -> int:
        """The version the engine serves."""
        return self.weights.version

    async def start(self) -> None:
        await self.engine.start()
        await self.publisher.publish(self.registration())
        self._loops = [
            asyncio.create_task(self.telemetry.run_heartbeats(self.config.heartbeat_s)),
            asyncio.create_task(self.telemetry.run_telemetry(self.config.telemetry_s)),
        ]

    def registration(self) -> WorkerRegistered:
        caps = self.engine.capabilities
        gpu_ids = list(self.engine.gpu_ids) if isinstance(self.engine, Resharder) else []
        return worker_registered_event(
            worker_id=self.worker_id,
            incarnation=self.incarnation,
            engine=self.config.engine_name,
            model=caps.model,
            tp_degree=caps.tp_degree,
            max_running=caps.max_running,
            max_kv_tokens=caps.max_kv_tokens,
            can_export_kv=caps.can_export_kv,
            node=self.config.node or socket.gethostname(),
            gpu_ids=gpu_ids,
            now=self.clock(),
            host=socket.gethostname(),
            time_scale=caps.time_scale,
            max_context_tokens=caps.max_context_tokens,
        )

    async def _register_again(self, reason: str) -> WorkerRegistered:
        """Register as a new incarnation (the engine relaunched: ``reason`` names why)."""
        self.incarnation = derive_id(self.incarnation.split(":")[0], reason)
        self.telemetry.incarnation = self.incarnation
        self.weight_loading.incarnation = self.incarnation
        registration = self.registration()
        await self.publisher.publish(registration)
        return registration

    async def handle(
        self,
        command: WorkerCommandT,
        *,
        is_redelivered: bool = False,
        arrival: CommandArrival | None = None,
    ) -> None:
        """Carry out one command; returns when it may be acknowledged (see module docstring).
        ``arrival``: when the command was stored and taken (timing of the step it starts).

        Raises ``WorkerFailing`` (the engine failed) or ``WorkerStopping`` (shutting down
        before the command's effects were all stored): do not acknowledge then. A worker's own
        command whose effects are stored (``WorkerDrained``, ``WorkerRetired``) is acknowledged
        even while shutting down."""
        self._check_alive()
        await self.handler.handle(command, is_redelivered=is_redelivered, arrival=arrival)
        if isinstance(command, TRAJECTORY_COMMANDS):
            self._check_alive()

    def _check_alive(self) -> None:
        if self.failed.is_set():
            raise WorkerFailing(f"worker {self.worker_id} is failing")
        if self.handler.segments.is_closing:
            raise WorkerStopping(f"worker {self.worker_id} is shutting down")

    # ---- the worker-wide actions (``commands.WorkerSide``) ---------------------------------------

    async def drain(self, command: Drain) -> None:
        """Wait until no trajectory is hosted (the handler refuses new ones meanwhile), publish
        ``WorkerDrained`` (one per drain command: its id derives from the command's). An
        ``Undrain`` meanwhile ends the wait without a report."""
        self.drained.clear()
        changed = self.handler.segments.changed
        while True:
            changed.clear()  # before the check, so that no change between them is missed
            if self.handler.mode is Mode.SERVING:
                return
            if not self.table.hosted() or self.failed.is_set():
                break
            await changed.wait()
        await self.publisher.publish(
            WorkerDrained(
                event_id=derive_id(self.worker_id, command.command_id, "drained"),
                occurred_at=self.clock(),
                worker_id=self.worker_id,
            )
        )
        self.drained.set()

    async def rejoin(self, command: Rejoin) -> None:
        """Declared failed under this incarnation: drop what it holds (it runs elsewhere now)
        and register as a new incarnation. A ``Rejoin`` of another incarnation is ignored."""
        if command.incarnation != self.incarnation:
            return
        hosted = self.table.hosted()
        logger.warning(
            "worker %s was declared failed (%s): dropping %d trajectories, registering again",
            self.worker_id, command.reason, len(hosted),
        )  # fmt: skip
        for row in hosted:
            async with self.table.lock_for(row.rollout_id, row.traj_id):
                await self.handler.segments.drop(row)
            self.table.compact(row.rollout_id, row.traj_id)
        self._new_incarnation()
        await self.publisher.publish(self.registration())
        self.handler.segments.changed.set()

    def _new_incarnation(self) -> None:
        self.incarnation = uuid.uuid4().hex[:12]
        self.telemetry.incarnation = self.incarnation
        self.weight_loading.incarnation = self.incarnation

    def undrain(self) -> None:
        """A drain still waiting returns without a report (the handler takes new trajectories
        again)."""
        self.drained.clear()
        self.handler.segments.changed.set()

    async def load_weights(self, command: LoadWeights, *, is_new: bool) -> None:
        await self.weight_loading.handle(command, is_new=is_new)

    async def retire(self, command: Retire) -> None:
        await self.resharding.retire(command)

    async def reshard(self, command: Reshard) -> None:
        try:
            await self.resharding.reshard(command)
        except EngineError as exc:
            await self._on_engine_failure(exc)
            raise WorkerFailing(f"worker {self.worker_id} could not re-shard") from exc

    async def _on_engine_failure(self, error: EngineError) -> None:
        if self.failed.is_set():
            return
        self.failed.set()
        self.handler.segments.changed.set()
        logger.error("engine of worker %s failed: %s", self.worker_id, error)
        hosted = [row.traj_id for row in self.table.hosted()]
        await self.publisher.publish(
            WorkerFailed(
                event_id=derive_id(self.worker_id, self.incarnation, "failed"),
                occurred_at=self.clock(),
                worker_id=self.worker_id,
                reason=f"engine failed: {error}",
                trajectory_ids=hosted,
                incarnation=self.incarnation,
            )
        )

    def begin_close(self) -> None:
        """Start no new step; cancel running ones (their commands go back unacknowledged);
        publishes stop retrying."""
        self.handler.segments.is_closing = True
        for segment in self.handler.segments.tasks:
            segment.cancel()
        self.publisher.close()

    async def close(self) -> None:
        """Stop loops and running steps (unacknowledged commands are redelivered) and the
        engine."""
        self.begin_close()
        tasks = [*self._loops]
        tasks += [segment for segment in self.handler.segments.tasks if not segment.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            await _cancelled(task)
        self._loops = []
        await self.engine.close()


async def _cancelled(task: asyncio.Task[object]) -> None:
    """Wait for a cancelled ``task`` to end, cancelling it again while it runs on.

    Python 3.11's ``asyncio.wait_for`` (which nats-py's request, hence every JetStream publish,
    awaits) drops a cancellation that arrives as its result does; a heartbeat loop cancelled
    then went on beating and ``close`` waited for it forever."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=_RECANCEL_S)
    if not task.cancelled():
        with contextlib.suppress(Exception):
            task.result()  # retrieved: a failure while closing is not worth a warning
