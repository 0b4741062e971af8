"""The control plane process: the router and worker liveness on one durable consumer,
and the ledger projector.

``ControlPlaneService(settings, config).run(stop)`` connects to NATS (or the data dir's embedded
server), then supervises, concurrently:

- the event gate (``heddle.controlplane.gating``) in front of them: refused events are
  dead-lettered, stale writers fenced, and each trajectory slot's accepted end delivered to
  its trainer's stream ``HEDDLE_OUT_<trainer>``;
- the deciders: one ``BundleRouter`` (``heddle.control.bundle_router``) holding one system
  bundle per policy in use, and the worker liveness fold (``heddle.controlplane.liveness``), all
  hosted by ONE ``DeciderConsumer`` on the durable ``<prefix>-plane``: each event is decoded
  once and handed to the units that handle it, the router's placement stage first. Every
  bundle's prediction decider shares one predictor (``heddle.controlplane.live_predictor``),
  taught at start by the history trace files and, after the replay, by earlier rollouts in the
  ledger. A liveness check runs every ``liveness_check_s`` once every event stored before it is
  folded in;
- the ledger projector (``heddle.controlplane.projector.Projector``), unless disabled, under its
  keeper (``heddle.controlplane.ledger_recovery``: a damaged ledger is rebuilt from the stream, or
  projection stops with the reason in ``<data_dir>/ledger-health.json``);
- ``<data_dir>/control-plane.json`` rewritten every ``status_interval_s``, and the deciders'
  stored position recorded apart from their durable (``heddle.bus.positions``), from which a
  durable that disappears is recreated (``heddle.controlplane.host``);
- the operations service (``heddle.controlplane.operations``: the ``heddle`` NATS micro service),
  answering from the ``OperationsView`` unit the deciders' consumer hosts beside the router.

A unit that fails (the deciders' consumer when outputs could not be stored, a lost database) is
rebuilt from the stream after a pause (``heddle.controlplane.supervision``).
``ready`` is set once the deciders are live and the first liveness check has run (stale workers
of earlier runs are then declared failed), which is when a launcher may start workers and
submit.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Awaitable, Callable

from heddle.bus import Bus, BusOptions
from heddle.config import Settings
from heddle.control.bundle_router import PLACEMENT, BundleRouter
from heddle.control.operations import OperationsView
from heddle.control.weights import WeightsDecider
from heddle.controlplane.control_options import control_options
from heddle.controlplane.gating import DeliveryStreams, Screen, TrainerRecords
from heddle.controlplane.host import PLANE, DeciderConsumer
from heddle.controlplane.ledger_history import ledger_history
from heddle.controlplane.ledger_recovery import LedgerKeeper, ProjectionStopped
from heddle.controlplane.ledger_restore import restore_if_empty
from heddle.controlplane.live_predictor import PredictionHooks
from heddle.controlplane.liveness import WorkerLiveness
from heddle.controlplane.liveness_checks import LivenessChecks
from heddle.controlplane.operations import OperationsService
from heddle.controlplane.plane_config import ControlPlaneConfig
from heddle.controlplane.status import (
    ControlPlaneStatus,
    consumer_report,
    slot_report,
    write_status,
)
from heddle.controlplane.store_guard import StoreGuard
from heddle.controlplane.submissions import TaskCheck
from heddle.controlplane.supervision import supervise
from heddle.events import WorkerHeartbeat
from heddle.events.subjects import EVENTS_STREAM
from heddle.ledger import LEDGER_CONSUMER, Ledger, open_ledger
from heddle.ledger.integrity import LedgerCorrupt, reading
from heddle.observability import ConsumerLagTracker, ConsumerRef, Metrics, start_metrics_server
from heddle.traces import TraceTrajectory, read_trace

log = logging.getLogger(__name__)

DECIDERS = "deciders"
"""Name of the deciders' unit (supervision, restarts)."""


class ControlPlaneService:
    def __init__(
        self,
        settings: Settings,
        config: ControlPlaneConfig | None = None,
        *,
        check_task: TaskCheck,
        trainer_records: TrainerRecords | None = None,
    ) -> None:
        """``check_task``: whether a submitted task fits its environment (the environments
        live with the workers: the process that runs the control plane gives it);
        ``trainer_records``: how failed trajectories' records and rollout summaries are built
        for the trainers (None: failures go to them as ``Failed`` events, and no summary is
        served)."""
        self.settings = settings
        self.config = config or ControlPlaneConfig()
        self.check_task = check_task
        self.trainer_records = trainer_records
        self.ready = asyncio.Event()
        self.started_at = time.time()
        self.consumers: dict[str, DeciderConsumer] = {}
        """The deciders' consumer under ``DECIDERS`` (one entry: all units share it)."""
        self.router: BundleRouter | None = None
        """The bundles in use (rebuilt, from the stream, whenever the deciders restart)."""
        self.restarts: dict[str, int] = {}
        self.hooks: PredictionHooks | None = None
        self.liveness: WorkerLiveness | None = None
        self.operations: OperationsView | None = None
        self.weights: WeightsDecider | None = None
        """Weight versions: which one is published, which worker loaded which."""
        """The operators' view (None until the deciders' consumer is live)."""
        self.store_guard: StoreGuard | None = None
        """Watches the JetStream store (a full disk) and resets the embedded server's."""
        self.keeper: LedgerKeeper | None = None
        """The ledger projector's keeper (rebuilds a damaged ledger from the stream)."""
        self.screen: Screen | None = None
        """The event gate in front of the deciders (None until they start)."""
        self._bus: Bus | None = None
        self._ledger: Ledger | None = None
        self._history: list[TraceTrajectory] = []
        self._stopping = False
        self._recorded_position = -1
        self._liveness_checked = False
        self.metrics = Metrics()

    # ---- lifecycle --------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set; then finish current batches and return."""
        self._history = [t for path in self.config.history for t in read_trace(path)]
        async with Bus(self.settings, BusOptions(name="heddle-control")) as bus:
            self._bus = bus
            if self.config.project_ledger or self.config.learn_from_ledger:
                self._ledger = await asyncio.to_thread(open_ledger, self.settings.ledger_url)
            if self.config.project_ledger and self._ledger is not None:
                await restore_if_empty(bus, self._ledger)  # a purged stream: its snapshot
            units: list[tuple[str, Callable[[], Awaitable[None]], str]] = [
                (DECIDERS, self._run_deciders, "rebuilding it from the stream")
            ]
            if self.config.project_ledger:
                units.append(
                    ("projector", self._run_projector, "resuming at the ledger's position")
                )
            tasks = [
                asyncio.create_task(
                    supervise(name, unit, self._is_stopping, self.restarts, recovery)
                )
                for name, unit, recovery in units
            ]
            tasks.append(asyncio.create_task(self._report_status()))
            guard = self.store_guard = StoreGuard(
                bus, self.settings, self.config.store, self.metrics
            )
            guarding = asyncio.create_task(
                supervise("store guard", guard.run, self._is_stopping, self.restarts, "again")
            )
            service = None
            if self.config.serve_operations:
                service = await OperationsService(
                    bus,
                    self._live_operations,
                    check_task=self.check_task,
                    summary=self.trainer_records.summary if self.trainer_records else None,
                    position=self._position,
                    heartbeats=self._heartbeats,
                ).serve()
            # Metrics (heddle.observability): the endpoint and the consumers' lag.
            metrics_server = start_metrics_server(self.config.metrics_port, self.metrics.registry)
            if metrics_server is not None:
                tasks.append(asyncio.create_task(self._lag_tracker(bus).run(stop)))
            try:
                await stop.wait()
            finally:
                if service is not None:
                    await service.stop()
                # The guard only watches: cancelled first, and its hold on publishes let go, so
                # that a stop during a full disk ends (those publishes then fail).
                guarding.cancel()
                bus.hold_publishes(False)
                self._stop_units()
                await asyncio.gather(*tasks, guarding, return_exceptions=True)
                self._write_status()
                if metrics_server is not None:
                    metrics_server.close()

    def _is_stopping(self) -> bool:
        return self._stopping

    def _stop_units(self) -> None:
        self._stopping = True
        for consumer in self.consumers.values():
            consumer.stop()
        if self.keeper is not None:
            self.keeper.stop()

    # ---- units ------------------------------------------------------------------------------

    async def _run_deciders(self) -> None:
        """The router and liveness on one consumer, with the liveness checks beside it."""
        bus = self._require_bus()
        hooks = self._new_prediction_hooks()
        router = self.router = self._new_router(hooks)
        liveness = self.liveness = WorkerLiveness(self.config.worker_timeout_s)
        operations = OperationsView()
        self.weights = WeightsDecider()
        self.operations = None
        observer = None  # metrics cost ~3% of the control plane's CPU: only when served
        host = self.config.host
        if self.config.metrics_port:
            observer = self.metrics.batch_observer(host.durable(PLANE), observe_inputs=True)
        failure = self.trainer_records.failure if self.trainer_records else None
        self.screen = Screen(DeliveryStreams(bus, self.config.delivery), failure=failure)
        consumer = DeciderConsumer(
            bus,
            [*router.stages, liveness, operations, self.weights],
            host,
            first=(router.stages[0].slot,),
            on_batch=observer,
            screen=self.screen,
        )
        self.consumers = {DECIDERS: consumer}

        async def on_replayed() -> None:
            hooks.attach(bus)  # the context predictor's requests: live events only
            if self.config.learn_from_ledger:
                await self._learn_from_ledger(hooks, router)
            # What exists now (modules, the replayed state, the predictor's history) lives as
            # long as the deciders: out of the cycle collector's way, whose full collections
            # otherwise pause the event loop for time proportional to everything tracked.
            gc.freeze()
            self.operations = operations  # replayed: answer operators from it

        run = asyncio.create_task(consumer.run(on_replayed=on_replayed))
        checker = LivenessChecks(
            bus, consumer, liveness, self.config.liveness_check_s, self._on_liveness_checked
        )
        checks = asyncio.create_task(checker.run())
        done, _ = await asyncio.wait({run, checks}, return_when=asyncio.FIRST_COMPLETED)
        if checks in done:
            consumer.stop()  # the checks failed: the fold is ahead of the stream, rebuild it
            await asyncio.gather(run, return_exceptions=True)
            checks.result()
            return
        checks.cancel()
        await asyncio.gather(checks, return_exceptions=True)
        run.result()

    async def _run_projector(self) -> None:
        assert self._ledger is not None
        keeper = LedgerKeeper(
            self._require_bus(), self.settings, self._ledger, on_new_ledger=self._use_ledger
        )
        self.keeper = keeper
        try:
            await keeper.run()
        except ProjectionStopped:
            return  # logged and in ledger-health.json (heddle status): the deciders run on

    def _use_ledger(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def _lag_tracker(self, bus: Bus) -> ConsumerLagTracker:
        durables = [self.config.host.durable(PLANE)]
        if self.config.project_ledger:
            durables.append(LEDGER_CONSUMER)
        refs = [ConsumerRef(EVENTS_STREAM, durable) for durable in durables]
        return ConsumerLagTracker(bus, self.metrics, refs)

    # ---- predictor and bundles ----------------------------------------------------------------

    def _new_prediction_hooks(self) -> PredictionHooks:
        hooks = PredictionHooks(self.config.predictor)
        hooks.learn_history(self._history)
        self.hooks = hooks
        return hooks

    async def _learn_from_ledger(self, hooks: PredictionHooks, router: BundleRouter) -> None:
        ledger = self._ledger
        if ledger is None:
            return
        try:
            with reading(ledger.url):
                history = await asyncio.to_thread(
                    ledger_history,
                    ledger,
                    exclude_rollouts=router.rollouts_seen,
                    max_rollouts=self.config.predictor.max_history_rollouts,
                )
        except LedgerCorrupt as exc:
            log.warning("the predictor learns nothing from the ledger: %s", exc)
            return
        count = hooks.learn_history(history)
        log.info("predictor learnt %d trajectories of earlier rollouts from the ledger", count)

    def _new_router(self, hooks: PredictionHooks) -> BundleRouter:
        """A fresh router (no decider of an earlier run reused): every bundle predicts with the
        shared predictor, the router's commands decided first."""
        config = self.config
        options = control_options(
            config.cost_model,
            config.hardware,
            predictor=hooks.predictor,
            seed=config.seed,
            transfer_kv=config.transfer_kv,
            history=self._history,
            engine_restart_s=config.engine_restart_s,
        )
        return BundleRouter(options, first=(PLACEMENT,), hooks=hooks)

    # ---- status -------------------------------------------------------------------------------

    def _live_operations(self) -> OperationsView | None:
        return self.operations if self.is_ready else None

    def _heartbeats(self) -> dict[str, WorkerHeartbeat]:
        return self.liveness.latest_heartbeats() if self.liveness is not None else {}

    def _position(self) -> int:
        consumer = self.consumers.get(DECIDERS)
        return consumer.stats.position if consumer is not None else 0

    @property
    def is_ready(self) -> bool:
        consumer = self.consumers.get(DECIDERS)
        return consumer is not None and consumer.stats.is_live and self._liveness_checked

    def _on_liveness_checked(self) -> None:
        self._liveness_checked = True

    async def _report_status(self) -> None:
        while not self._stopping:
            if not self.ready.is_set() and self.is_ready:
                self.ready.set()
                log.info("control plane ready")
            self._write_status()
            await self._record_position()
            # Poll fast until ready: a launcher waits for the file to say so.
            interval_s = self.config.status_interval_s if self.ready.is_set() else 0.1
            await asyncio.sleep(interval_s)

    async def _record_position(self) -> None:
        consumer = self.consumers.get(DECIDERS)
        if consumer is None or not consumer.stats.is_live or self._bus is None:
            return
        position = consumer.stored_position
        if position == self._recorded_position:
            return
        try:
            await self._bus.positions.record(consumer.durable, position)
        except Exception as exc:  # next time: a durable lost meanwhile resumes a bit earlier
            log.warning("cannot record the deciders' position: %r", exc)
            return
        self._recorded_position = position

    def _write_status(self) -> None:
        try:
            write_status(self.settings.data_dir, self.status())
        except OSError as exc:
            log.warning("cannot write the control plane status: %s", exc)

    def status(self) -> ControlPlaneStatus:
        hooks = self.hooks
        router = self.router
        return ControlPlaneStatus(
            pid=os.getpid(),
            started_at=self.started_at,
            updated_at=time.time(),
            is_ready=self.is_ready,
            nats_url=self.settings.nats_url or "embedded",
            ledger_url=self.settings.ledger_url if self._ledger is not None else "",
            predictor=hooks.predictor.name if hooks is not None else "",
            num_predictor_samples=hooks.online.num_samples if hooks is not None else 0,
            policies=router.policies if router is not None else [],
            live_workers=self.liveness.live_workers() if self.liveness is not None else [],
            consumers=[
                consumer_report(consumer.stats, self.restarts.get(name, 0))
                for name, consumer in self.consumers.items()
            ],
            slots=[
                slot_report(stats)
                for consumer in self.consumers.values()
                for stats in consumer.stats.units.values()
            ],
            store=self.store_guard.report if self.store_guard is not None else None,
        )

    def _require_bus(self) -> Bus:
        if self._bus is None:
            raise RuntimeError("the control plane is not running")
        return self._bus
