"""The metric families of a Heddle process, in one registry (``Metrics``).

Workers (from their telemetry and the events they publish; label ``worker``):

- ``heddle_worker_running`` / ``heddle_worker_waiting``: batch size and queue depth of the engine;
- ``heddle_worker_kv_usage``: fraction of KV capacity in use; ``heddle_worker_tokens_per_second``
  (model time);
- ``heddle_step_seconds{phase=queue|prefill|decode}``: histogram of each generation's times
  (model seconds, as ``Generated`` reports them);
- ``heddle_preemptions_total{source=engine|control}``: preemptions the engine reported inside a
  generation, and ``Preempted`` events (control-plane preemptions);
- ``heddle_migrations_total{kv=transferred|reprefill}`` and
  ``heddle_migration_transfer_seconds``; ``heddle_recomputed_tokens_total``;
- ``heddle_trajectories_total{outcome=completed|failed}``.

Control plane (label ``consumer`` = the decider consumer's durable name):

- ``heddle_decide_seconds``: wall time of a consumer's batch, from taking it to its outputs
  stored (a step event's path to its command inside the control plane);
- ``heddle_predictions_total{predictor}``, ``heddle_prediction_last_relative_error`` and the
  histogram ``heddle_prediction_relative_error`` (known when the trajectory completes);
- ``heddle_migrations_requested_total``, ``heddle_commands_total{action}``;
- ``heddle_consumer_lag_messages`` (stream last sequence - the consumer's ack floor) and
  ``heddle_consumer_pending_messages`` (its filtered messages not yet acknowledged);
- ``heddle_rollout_trajectories_total{rollout, state=submitted|completed|failed}``: each
  rollout's progress as the control plane's events show it (since this process started);
- ``heddle_dead_letters``: dead-letter records stored in the events stream;
- ``heddle_stream_store_writable`` (1, or 0 while a stream refuses writes: a full disk),
  ``heddle_stream_store_free_bytes`` (the embedded store's file system) and
  ``heddle_stream_store_resets_total`` (``heddle.controlplane.store_guard``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from heddle.events import (
    Completed,
    Event,
    Failed,
    Generated,
    Migrated,
    MigrationRequested,
    Predicted,
    Preempted,
    TrajectorySubmitted,
    WorkerCommand,
    WorkerTelemetry,
)
from heddle.observability.predictions import PredictionTracker

STEP_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 3600)
"""Model seconds: a step lasts from milliseconds (a short turn) to minutes (a 32k-token turn)."""
DECIDE_BUCKETS_S = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1)
"""Wall seconds: the target is p99 < 5 ms from a step event to its command."""
ERROR_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16)

BatchObserver = Callable[[Sequence[Event], Sequence[Event | WorkerCommand], float], None]
"""(events of a batch, outputs published for it, wall seconds from taking it to stored)."""


class Metrics:
    """Every Heddle metric family, registered in ``registry`` (a fresh one by default, so that
    tests and several agents in one process never share state by accident)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._predictions = PredictionTracker()
        self._define_worker_metrics()
        self._define_control_metrics()

    def _define_worker_metrics(self) -> None:
        worker = ("worker",)
        self.running = self._gauge("heddle_worker_running", "Generations running", worker)
        self.waiting = self._gauge("heddle_worker_waiting", "Generations queued", worker)
        self.kv_usage = self._gauge("heddle_worker_kv_usage", "KV capacity in use (0-1)", worker)
        self.tokens_per_s = self._gauge(
            "heddle_worker_tokens_per_second", "Output tokens per model second", worker
        )
        self.step_s = Histogram(
            "heddle_step_seconds",
            "Generation times per step (model seconds)",
            ("worker", "phase"),
            buckets=STEP_BUCKETS_S,
            registry=self.registry,
        )
        self.preemptions = self._counter(
            "heddle_preemptions", "Preemptions of running generations", ("worker", "source")
        )
        self.migrations = self._counter("heddle_migrations", "Completed migrations", ("kv",))
        self.transfer_s = Histogram(
            "heddle_migration_transfer_seconds",
            "KV transfer time of a migration (model seconds)",
            buckets=STEP_BUCKETS_S,
            registry=self.registry,
        )
        self.recomputed_tokens = self._counter(
            "heddle_recomputed_tokens", "Tokens prefilled again after a lost KV cache", worker
        )
        self.trajectories = self._counter(
            "heddle_trajectories", "Trajectories that ended", ("worker", "outcome")
        )

    def _define_control_metrics(self) -> None:
        self.decide_s = Histogram(
            "heddle_decide_seconds",
            "Wall time of a decider batch, from taking it to its outputs stored",
            ("consumer",),
            buckets=DECIDE_BUCKETS_S,
            registry=self.registry,
        )
        self.predictions = self._counter(
            "heddle_predictions", "Remaining-length predictions", ("predictor",)
        )
        self.prediction_last_error = self._gauge(
            "heddle_prediction_last_relative_error",
            "|predicted - actual| / actual remaining tokens of the last checked prediction",
            (),
        )
        self.prediction_error = Histogram(
            "heddle_prediction_relative_error",
            "|predicted - actual| / actual remaining tokens, checked at completion",
            buckets=ERROR_BUCKETS,
            registry=self.registry,
        )
        self.migrations_requested = self._counter(
            "heddle_migrations_requested", "Migrations the placement decider asked for", ()
        )
        self.commands = self._counter("heddle_commands", "Worker commands issued", ("action",))
        self.consumer_lag = self._gauge(
            "heddle_consumer_lag_messages",
            "Stream last sequence minus the consumer's acknowledged position",
            ("consumer",),
        )
        self.consumer_pending = self._gauge(
            "heddle_consumer_pending_messages",
            "Messages of the consumer's subjects not yet acknowledged",
            ("consumer",),
        )
        self.rollout_trajectories = self._counter(
            "heddle_rollout_trajectories",
            "Trajectories of each rollout submitted, completed and failed",
            ("rollout", "state"),
        )
        self.dead_letters = self._gauge(
            "heddle_dead_letters", "Dead-letter records stored in the events stream", ()
        )
        self.store_writable = self._gauge(
            "heddle_stream_store_writable",
            "1 while the JetStream store takes writes, 0 while a stream refuses them",
            (),
        )
        self.store_free_bytes = self._gauge(
            "heddle_stream_store_free_bytes",
            "Free bytes where the embedded JetStream store lives (-1: not on this machine)",
            (),
        )
        self.store_resets = self._counter(
            "heddle_stream_store_resets", "JetStream resets after a store refused writes", ()
        )

    def _gauge(self, name: str, documentation: str, labels: tuple[str, ...]) -> Gauge:
        return Gauge(name, documentation, labels, registry=self.registry)

    def _counter(self, name: str, documentation: str, labels: tuple[str, ...]) -> Counter:
        return Counter(name, documentation, labels, registry=self.registry)

    # ---- workers ---------------------------------------------------------------------------

    def observe_telemetry(self, telemetry: WorkerTelemetry) -> None:
        """A worker's load report: batch size, queue depth, KV usage, token rate."""
        worker = telemetry.worker_id
        self.running.labels(worker).set(telemetry.num_running)
        self.waiting.labels(worker).set(telemetry.num_waiting)
        self.kv_usage.labels(worker).set(telemetry.kv_usage)
        self.tokens_per_s.labels(worker).set(telemetry.tokens_per_s)

    def observe_published(self, event: Event) -> None:
        """An event a worker published (each stored event is passed once)."""
        match event:
            case Generated():
                self._observe_generated(event)
            case Preempted():
                self.preemptions.labels(event.worker_id, "control").inc()
            case Migrated():
                self.migrations.labels("transferred" if event.kv_transferred else "reprefill").inc()
                self.transfer_s.observe(event.transfer_s)
            case Completed():
                worker = event.worker_history[-1] if event.worker_history else ""
                self.trajectories.labels(worker, "completed").inc()
            case Failed():
                self.trajectories.labels(event.worker_id, "failed").inc()

    def _observe_generated(self, event: Generated) -> None:
        worker = event.worker_id
        self.step_s.labels(worker, "queue").observe(event.queue_s)
        self.step_s.labels(worker, "prefill").observe(event.prefill_s)
        self.step_s.labels(worker, "decode").observe(event.decode_s)
        if event.num_preemptions:
            self.preemptions.labels(worker, "engine").inc(event.num_preemptions)
        if event.num_recomputed_tokens:
            self.recomputed_tokens.labels(worker).inc(event.num_recomputed_tokens)

    # ---- control plane ---------------------------------------------------------------------

    def observe_input(self, event: Event) -> None:
        """An event a decider consumer took in: checks predictions when trajectories complete.
        Pass each event once per process (e.g. from the prediction consumer only)."""
        match event:
            case TrajectorySubmitted():
                self.rollout_trajectories.labels(event.rollout_id, "submitted").inc()
            case Completed():
                self.rollout_trajectories.labels(event.rollout_id, "completed").inc()
            case Failed():
                self.rollout_trajectories.labels(event.rollout_id, "failed").inc()
        checked = self._predictions.observe(event)
        if checked is not None:
            self.prediction_last_error.set(checked.relative_error)
            self.prediction_error.observe(checked.relative_error)

    def observe_decision(
        self, consumer: str, outputs: Iterable[Event | WorkerCommand], elapsed_s: float
    ) -> None:
        """One decision: its wall time (event taken -> outputs published) and what it issued."""
        self.decide_s.labels(consumer).observe(elapsed_s)
        for output in outputs:
            match output:
                case Predicted():
                    self.predictions.labels(output.predictor).inc()
                    self._predictions.observe(output)
                case MigrationRequested():
                    self.migrations_requested.inc()
                case WorkerCommand():
                    self.commands.labels(type(output).action).inc()

    def batch_observer(self, consumer: str, *, observe_inputs: bool = False) -> BatchObserver:
        """A callback for a decider consumer: after each batch's outputs are stored, call it
        with the batch's events, the outputs and the batch's wall time. ``observe_inputs`` on
        one consumer only (the prediction slot), so each event feeds the error check once."""

        def observe(
            events: Sequence[Event], outputs: Sequence[Event | WorkerCommand], elapsed_s: float
        ) -> None:
            if observe_inputs:
                for event in events:
                    self.observe_input(event)
            self.observe_decision(consumer, outputs, elapsed_s)

        return observe

    def set_store(self, is_writable: bool, free_bytes: int | None) -> None:
        self.store_writable.set(1 if is_writable else 0)
        self.store_free_bytes.set(-1 if free_bytes is None else free_bytes)

    def set_consumer_position(
        self, consumer: str, *, last_sequence: int, ack_floor: int, num_unacked: int
    ) -> None:
        self.consumer_lag.labels(consumer).set(max(0, last_sequence - ack_floor))
        self.consumer_pending.labels(consumer).set(num_unacked)
