"""Metrics: scraped over HTTP from a real endpoint; the worker sink, prediction errors against a
brute-force reference, and consumer lag against a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from heddle.bus import Bus, ConsumerSpec, Delivery
from heddle.bus.streams import provision_consumer
from heddle.config import Settings
from heddle.errors import UserError
from heddle.events import (
    Completed,
    DeadLettered,
    Event,
    EventT,
    Failed,
    Generated,
    Migrated,
    MigrateOut,
    Predicted,
    Preempted,
    ToolCall,
    TrajectorySpec,
    TrajectorySubmitted,
    WorkerCommand,
    WorkerHeartbeat,
    WorkerTelemetry,
    decode_event,
)
from heddle.events.subjects import EVENTS_STREAM, trajectory_subject
from heddle.observability import (
    ConsumerLagTracker,
    ConsumerRef,
    Metrics,
    MetricsServer,
    MetricsSink,
    PredictionTracker,
    start_metrics_server,
)
from heddle.workers.environments import validate_task


def generated(traj: str, step: int, num_tokens: int, **extra: object) -> Generated:
    return Generated(
        event_id=f"r1:{traj}:{step}:generated",
        rollout_id="r1",
        occurred_at=1.0,
        traj_id=traj,
        step=step,
        worker_id="w00",
        output_token_ids=[1] * num_tokens,
        **extra,  # type: ignore[arg-type]
    )


def predicted(traj: str, step: int, remaining: float) -> Predicted:
    return Predicted(
        event_id=f"r1:{traj}:{step}:predicted",
        rollout_id="r1",
        occurred_at=1.0,
        traj_id=traj,
        step=step,
        predicted_remaining_tokens=remaining,
        predictor="oracle",
    )


def completed(traj: str, num_output_tokens: int) -> Completed:
    return Completed(
        event_id=f"r1:{traj}:completed",
        rollout_id="r1",
        occurred_at=2.0,
        traj_id=traj,
        num_steps=1,
        num_output_tokens=num_output_tokens,
        worker_history=["w00"],
    )


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint by (name, sorted labels)."""
    text = httpx.get(url, timeout=5.0).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def served() -> tuple[Metrics, MetricsServer]:
    metrics = Metrics()
    server = MetricsServer.start(metrics.registry, 0, host="127.0.0.1")
    yield metrics, server
    server.close()


class FakeSink:
    """Records what the wrapped sink forwards (the real one is the bus)."""

    def __init__(self) -> None:
        self.messages: list[Event | WorkerCommand | ToolCall] = []
        self.telemetry: list[WorkerTelemetry | WorkerHeartbeat] = []

    async def publish(self, message: Event | WorkerCommand | ToolCall) -> None:
        self.messages.append(message)

    async def publish_telemetry(self, telemetry: WorkerTelemetry | WorkerHeartbeat) -> None:
        self.telemetry.append(telemetry)


async def test_worker_sink_metrics_are_scraped_over_http(
    served: tuple[Metrics, MetricsServer],
) -> None:
    metrics, server = served
    inner = FakeSink()
    sink = MetricsSink(inner, metrics)
    telemetry = WorkerTelemetry(
        worker_id="w00", sent_at=1.0, num_running=7, num_waiting=3, kv_usage=0.25
    )
    await sink.publish_telemetry(telemetry)
    step = generated("t1", 0, 5, queue_s=0.3, decode_s=2.0, num_preemptions=2,
                     num_recomputed_tokens=40)  # fmt: skip
    preempted = Preempted(
        event_id="p", rollout_id="r1", occurred_at=1.0, traj_id="t1", step=0, worker_id="w00"
    )
    moved = Migrated(
        event_id="m", rollout_id="r1", occurred_at=1.0, traj_id="t1", source_worker_id="w00",
        target_worker_id="w01", kv_transferred=True, num_bytes=10, transfer_s=0.5,
    )  # fmt: skip
    for event in (step, preempted, moved, completed("t1", 5)):
        await sink.publish(event)
    assert inner.messages == [step, preempted, moved, completed("t1", 5)]
    assert inner.telemetry == [telemetry]

    samples = scrape(server.url)
    w = (("worker", "w00"),)
    assert samples[("heddle_worker_running", w)] == 7
    assert samples[("heddle_worker_waiting", w)] == 3
    assert samples[("heddle_worker_kv_usage", w)] == 0.25
    decode = (("phase", "decode"), ("worker", "w00"))
    assert samples[("heddle_step_seconds_count", decode)] == 1
    assert samples[("heddle_step_seconds_sum", decode)] == 2.0
    assert samples[("heddle_preemptions_total", (("source", "engine"), *w))] == 2
    assert samples[("heddle_preemptions_total", (("source", "control"), *w))] == 1
    assert samples[("heddle_migrations_total", (("kv", "transferred"),))] == 1
    assert samples[("heddle_recomputed_tokens_total", w)] == 40
    assert samples[("heddle_trajectories_total", (("outcome", "completed"), *w))] == 1


def test_control_plane_decisions_and_prediction_error(
    served: tuple[Metrics, MetricsServer],
) -> None:
    metrics, server = served
    metrics.observe_decision("prediction", [predicted("t1", -1, 100.0)], 0.002)
    command = MigrateOut(
        command_id="c", issued_at=1.0, worker_id="w00", traj_id="t1", target_worker_id="w01",
        migration_id="m",
    )  # fmt: skip
    metrics.observe_decision("placement", [command], 0.004)
    metrics.observe_input(generated("t1", 0, 30))
    metrics.observe_input(completed("t1", 50))  # actual remaining after step -1: 50 tokens
    samples = scrape(server.url)
    assert samples[("heddle_predictions_total", (("predictor", "oracle"),))] == 1
    assert samples[("heddle_commands_total", (("action", "migrate_out"),))] == 1
    assert samples[("heddle_decide_seconds_count", (("consumer", "placement"),))] == 1
    assert samples[("heddle_prediction_last_relative_error", ())] == pytest.approx(1.0)


def test_metrics_port_zero_serves_nothing_and_bad_ports_are_user_errors() -> None:
    metrics = Metrics()
    assert start_metrics_server(0, metrics.registry) is None
    with pytest.raises(UserError, match="metrics-port"):
        start_metrics_server(70000, metrics.registry)
    server = MetricsServer.start(metrics.registry, 0, host="127.0.0.1")
    try:
        with pytest.raises(UserError, match="cannot serve metrics"):
            start_metrics_server(server.port, metrics.registry, host="127.0.0.1")
    finally:
        server.close()


_STEPS = st.lists(st.integers(0, 500), min_size=1, max_size=6)


@settings(max_examples=150)
@given(
    outputs=_STEPS,
    predictions=st.lists(st.tuples(st.integers(-1, 6), st.floats(0, 1e4)), max_size=6),
    data=st.data(),
)
def test_prediction_error_matches_brute_force(
    outputs: list[int], predictions: list[tuple[int, float]], data: st.DataObject
) -> None:
    """Whatever the interleaving of steps and predictions (duplicates included), the error is
    that of the prediction made at the highest step, against the output after that step."""
    events: list[Event] = [generated("t", i, n) for i, n in enumerate(outputs)]
    events += [predicted("t", step, value) for step, value in predictions]
    events += [generated("t", 0, outputs[0])]  # a re-published step counts once
    order = data.draw(st.permutations(events))
    tracker = PredictionTracker()
    for event in order:
        assert tracker.observe(event) is None
    checked = tracker.observe(completed("t", sum(outputs)))
    assert tracker.num_tracked == 0
    if not predictions:
        assert checked is None
        return
    best_step = max(step for step, _ in predictions)
    latest_at_best = [
        e.predicted_remaining_tokens
        for e in order
        if isinstance(e, Predicted) and e.step == best_step
    ][-1]
    assert checked is not None
    assert checked.predicted_remaining_tokens == latest_at_best
    assert checked.actual_remaining_tokens == sum(outputs[best_step + 1 :])
    actual = max(1, checked.actual_remaining_tokens)
    expected = abs(checked.predicted_remaining_tokens - checked.actual_remaining_tokens) / actual
    assert checked.relative_error == pytest.approx(expected)


async def test_consumer_lag_from_a_real_stream(nats_url: str, tmp_path: Path) -> None:
    metrics = Metrics()
    consumer = ConsumerSpec("lagging", EVENTS_STREAM, (trajectory_subject("r1", "*", ">"),),
                            role="operator", fetch_wait_s=0.2)  # fmt: skip
    async with Bus(Settings(nats_url=nats_url, data_dir=tmp_path)) as bus:
        await provision_consumer(bus.js, consumer)
        await bus.publish_many([generated(f"t{i}", 0, 3) for i in range(5)])
        refs = [ConsumerRef(EVENTS_STREAM, "lagging"), ConsumerRef(EVENTS_STREAM, "absent")]
        tracker = ConsumerLagTracker(bus, metrics, refs)
        await tracker.poll()

        def lag(name: str) -> float | None:
            return metrics.registry.get_sample_value(name, {"consumer": "lagging"})

        assert lag("heddle_consumer_lag_messages") == 5
        assert lag("heddle_consumer_pending_messages") == 5

        async def take(batch: list[Delivery[EventT]]) -> None:
            return None

        await bus.batch_runner(consumer, decode_event, take).run(until_idle=True)
        await tracker.poll()
        assert lag("heddle_consumer_lag_messages") == 0
        assert lag("heddle_consumer_pending_messages") == 0
        assert metrics.registry.get_sample_value("heddle_dead_letters") == 0
        dead = DeadLettered(
            event_id="d1", occurred_at=1.0, consumer="lagging", subject="x", stream_sequence=1,
            reason="bad", role="operator",
        )  # fmt: skip
        await bus.publish_many([dead, generated("t9", 0, 3)])
        await tracker.poll()
        assert metrics.registry.get_sample_value("heddle_dead_letters") == 1


def test_rollout_progress_counts_submitted_completed_and_failed() -> None:
    metrics = Metrics()
    for index in range(3):
        spec = TrajectorySpec(group_id="g", index=index, environment="math")
        metrics.observe_input(
            TrajectorySubmitted(
                event_id=f"s{index}", rollout_id="r1", occurred_at=1.0, traj_id=f"t{index}",
                spec=spec,
            )
        )  # fmt: skip
    metrics.observe_input(completed("t0", 5))
    metrics.observe_input(
        Failed(event_id="f", rollout_id="r1", occurred_at=1.0, traj_id="t1", step=0, reason="x")
    )

    def count(state: str) -> float | None:
        labels = {"rollout": "r1", "state": state}
        return metrics.registry.get_sample_value("heddle_rollout_trajectories_total", labels)

    assert (count("submitted"), count("completed"), count("failed")) == (3, 1, 1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_worker_process_serves_its_metrics(nats_url: str, tmp_path: Path) -> None:
    """``heddle worker --metrics-port``: the agent's telemetry reaches the endpoint."""
    port = free_port()
    env = dict(os.environ, HEDDLE_NATS_URL=nats_url, HEDDLE_DATA_DIR=str(tmp_path))
    child = subprocess.Popen(
        [sys.executable, "-c", "from heddle.cli import main; main()", "worker", "--id=w07",
         "--engine=sim", "--telemetry-s=0.2", f"--metrics-port={port}"],
        env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        running = None
        for _ in range(1200):  # 120 s: a loaded machine starts a worker slowly
            time.sleep(0.1)
            with contextlib.suppress(httpx.TransportError):
                running = scrape(f"http://127.0.0.1:{port}/metrics").get(
                    ("heddle_worker_running", (("worker", "w07"),))
                )
            if running is not None or child.poll() is not None:
                break
        assert running == 0
    finally:
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 0


async def test_control_plane_serves_consumer_lag(nats_url: str, tmp_path: Path) -> None:
    """``ControlPlaneService`` with a metrics port: every durable's lag is scraped."""
    from heddle.controlplane import ControlPlaneConfig, ControlPlaneService

    port = free_port()
    settings = Settings(nats_url=nats_url, data_dir=tmp_path)
    service = ControlPlaneService(
        settings, ControlPlaneConfig(metrics_port=port), check_task=validate_task
    )
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    try:
        await asyncio.wait_for(service.ready.wait(), timeout=60)
        async with httpx.AsyncClient() as client:
            consumers: set[str] = set()
            for _ in range(600):  # 60 s
                text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
                consumers = {
                    sample.labels["consumer"]
                    for family in text_string_to_metric_families(text)
                    for sample in family.samples
                    if sample.name == "heddle_consumer_lag_messages"
                }
                if len(consumers) == 2:
                    break
                await asyncio.sleep(0.1)
        assert consumers == {"control-plane", "ledger"}  # the deciders share one durable
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=30)
