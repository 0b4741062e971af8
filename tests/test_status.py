"""`heddle status`: the snapshot of a ledger holding a finished and a running rollout (projected
from simulated rollouts' events), the control plane's status file, the CLI's table and JSON,
and one-line errors."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from heddle.bus import Bus, ConsumerSpec
from heddle.bus.micro import request
from heddle.bus.streams import provision_consumer
from heddle.cli.apps import app
from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.control.bundle import ControlOptions, build_bundle
from heddle.control.systems import system_spec
from heddle.controlplane.operations import ops_subject
from heddle.controlplane.snapshot import collect_status, slowest_trajectories
from heddle.controlplane.status import ConsumerReport, ControlPlaneStatus, write_status
from heddle.events import (
    DeadLettered,
    Event,
    EventT,
    RolloutEvent,
    RolloutFinished,
    TrajectoryEvent,
    WorkerHeartbeat,
)
from heddle.events.subjects import EVENTS_STREAM, EVENTS_SUBJECTS
from heddle.ledger import LedgerWriter, open_ledger, queries
from heddle.observability.probe import probe_stream, running_nats_url
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.sim import SimConfig, Simulator, make_simulation_predictor
from heddle.sim.simulator import ROLLOUT_ID
from heddle.traces import TraceStep, TraceTrajectory
from heddle.workloads import generate

NOW = 5000.0


@functools.cache
def recorded_events() -> list[Event]:
    """A finished rollout ``sim`` (heddle) and a running one ``live`` (verl, first half of its
    events), a heartbeat and a dead letter."""
    trace = generate("coding", 32, seed=2)
    config = SimConfig(model="qwen3-8b", num_gpus=4, predictor="oracle", record_events=True)
    finished = _events_of(trace, "heddle", config)
    running = [
        _renamed(e, "live")
        for e in _events_of(trace, "verl", config)
        if isinstance(e, (RolloutEvent, TrajectoryEvent)) and not isinstance(e, RolloutFinished)
    ]
    heartbeat = WorkerHeartbeat(event_id="hb", occurred_at=NOW - 3.0, worker_id="w00",
                                sequence=1, num_running=7, num_waiting=2, kv_usage=0.5)  # fmt: skip
    dead = DeadLettered(event_id="dl", occurred_at=1.0, consumer="ledger", subject="x",
                        stream_sequence=9, reason="bad JSON")  # fmt: skip
    return [*finished, *running[: len(running) // 2], heartbeat, dead]


def _events_of(trace: list, policy: str, config: SimConfig) -> list[Event]:  # type: ignore[type-arg]
    options = ControlOptions(
        cost_for_tp=config.cost_for_tp, predictor=make_simulation_predictor(trace, config)
    )
    control = build_bundle(system_spec(policy), options)
    return Simulator(trace, control, [1, 1, 2], config).run().events


def _renamed(event: Event, rollout_id: str) -> Event:
    return msgspec.structs.replace(
        event, rollout_id=rollout_id, event_id=f"{rollout_id}:{event.event_id}"
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    ledger = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        events: list[EventT] = recorded_events()  # type: ignore[assignment]
        LedgerWriter(ledger, "ledger").project(list(enumerate(events, start=1)))
    finally:
        ledger.close()
    return tmp_path


def control_status(updated_at: float) -> ControlPlaneStatus:
    report = ConsumerReport(durable="control-prediction", position=40, num_pending=3,
                            num_replayed=0, num_decided=40, num_outputs=12, num_rejected=0,
                            is_live=True, batch_ms_p50=0.4, batch_ms_p99=2.5)  # fmt: skip
    return ControlPlaneStatus(pid=4242, started_at=0.0, updated_at=updated_at, is_ready=True,
                              nats_url="embedded", predictor="online", policies=["verl"],
                              consumers=[report])  # fmt: skip


def test_snapshot_of_a_finished_and_a_running_rollout(data_dir: Path) -> None:
    ledger = open_ledger(f"sqlite:///{data_dir / 'ledger.db'}")
    try:
        snapshot = collect_status(ledger, control_status(NOW - 1.0), now=NOW, num_slowest=4)
        rows = queries.trajectories(ledger, "live")
    finally:
        ledger.close()
    by_id = {r.rollout_id: r for r in snapshot.rollouts}
    assert set(by_id) == {ROLLOUT_ID, "live"}
    assert by_id[ROLLOUT_ID].status == "finished" and by_id[ROLLOUT_ID].policy == "heddle"
    assert by_id[ROLLOUT_ID].num_completed == 32 == by_id[ROLLOUT_ID].num_trajectories
    assert by_id["live"].status == "running"
    assert by_id["live"].makespan_s == pytest.approx(NOW)  # submitted at 0, time scale 1
    assert 0 < by_id["live"].num_completed < 32

    assert snapshot.focus_rollout_id == "live"  # the running one
    elapsed = [t.elapsed_s for t in snapshot.slowest]
    assert len(elapsed) == 4 and elapsed == sorted(elapsed, reverse=True)
    unfinished = [r for r in rows if r.status != "completed"]
    assert elapsed[0] == pytest.approx(NOW) and snapshot.slowest[0].status != "completed"
    assert len(unfinished) >= 4
    assert slowest_trajectories(rows, NOW, 1.0, 4) == snapshot.slowest

    workers = {w.worker_id: w for w in snapshot.workers}
    assert sorted(workers) == ["w00", "w01", "w02"] and workers["w02"].tp_degree == 2
    assert workers["w00"].num_running == 7 and workers["w00"].heartbeat_age_s == pytest.approx(3)
    assert workers["w01"].heartbeat_age_s is None

    consumers = {c.consumer: c for c in snapshot.consumers}
    assert consumers["control-prediction"].lag == 3 and consumers["control-prediction"].is_live
    assert (
        consumers["ledger"].position == len(recorded_events()) and consumers["ledger"].lag is None
    )
    assert snapshot.num_dead_letters == 1
    assert snapshot.control_plane is not None and snapshot.control_plane.predictor == "online"


def test_cli_json_and_table_of_a_named_rollout(data_dir: Path) -> None:
    write_status(data_dir, control_status(updated_at=0.0))  # an old file: a stopped plane
    runner = CliRunner()
    result = runner.invoke(app, ["--data-dir", str(data_dir), "status", ROLLOUT_ID, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["focus_rollout_id"] == ROLLOUT_ID
    assert len(document["slowest"]) == 5
    assert all(t["status"] == "completed" for t in document["slowest"])
    assert document["num_dead_letters"] == 1
    assert document["control_plane"]["report_age_s"] > 1000

    table = runner.invoke(app, ["--data-dir", str(data_dir), "status"])
    assert table.exit_code == 0, table.output
    for text in ("rollouts", "slowest trajectories of live", "w02", "control-prediction",
                 "dead letters: 1", "silent for"):  # fmt: skip
        assert text in table.output, text


def heddle(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}
    return subprocess.run(
        [sys.executable, "-c", "from heddle.cli import main; main()", "--data-dir",
         str(data_dir), *args],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def test_no_ledger_and_unknown_rollouts_are_one_line_errors(tmp_path: Path) -> None:
    empty = heddle("status", data_dir=tmp_path / "nothing-here")
    assert empty.returncode == 2
    assert empty.stderr.count("\n") == 1 and "no ledger at" in empty.stderr
    assert not (tmp_path / "nothing-here" / "ledger.db").exists()

    open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}").close()
    unknown = CliRunner().invoke(app, ["--data-dir", str(tmp_path), "status", "r-missing"])
    assert unknown.exit_code != 0 and "no rollout 'r-missing'" in str(unknown.exception)
    fresh = CliRunner().invoke(app, ["--data-dir", str(tmp_path), "status", "--json"])
    assert fresh.exit_code == 0 and json.loads(fresh.output)["rollouts"] == []


async def test_lag_is_read_from_a_running_nats(data_dir: Path, nats_url: str) -> None:
    settings = Settings(nats_url=nats_url, data_dir=data_dir)
    async with Bus(settings) as bus:
        await provision_consumer(
            bus.js,
            ConsumerSpec("ledger", EVENTS_STREAM, (EVENTS_SUBJECTS,), role="ledger_projector"),
        )
        await bus.publish_many(list(recorded_events())[:5])
        probe = await probe_stream(settings, ["ledger", "control-prediction"])
    assert probe is not None and probe.last_sequence == 5
    assert probe.durables["ledger"].num_unacked == 5 and "control-prediction" not in probe.durables
    ledger = open_ledger(f"sqlite:///{data_dir / 'ledger.db'}")
    try:
        snapshot = collect_status(ledger, control_status(NOW), now=NOW, stream=probe)
    finally:
        ledger.close()
    consumers = {c.consumer: c for c in snapshot.consumers}
    assert consumers["ledger"].lag == 5 and consumers["control-prediction"].lag == 3
    assert snapshot.stream_last_sequence == 5

    embedded = Settings(data_dir=data_dir / "embedded")
    assert running_nats_url(embedded) is None  # nothing runs there: status starts nothing
    async with Bus(embedded) as bus:
        assert running_nats_url(embedded) == bus.url
    assert await probe_stream(embedded, ["ledger"]) is None


def test_executors_show_their_sandbox_isolation_level() -> None:
    """The executors' registrations (read from NATS) name the level; unisolated stands out."""
    from rich.console import Console

    from heddle.cli.status import print_status
    from heddle.events import ExecutorRegistered
    from heddle.observability.probe import StreamProbe

    def registered(executor_id: str, isolation: str, detail: str) -> ExecutorRegistered:
        return ExecutorRegistered(
            event_id=f"{executor_id}:registered",
            occurred_at=NOW - 30,
            executor_id=executor_id,
            pool="default",
            isolation=isolation,
            isolation_detail=detail,
            host="h1",
        )

    probe = StreamProbe(
        7,
        {},
        [registered("e1", "bwrap", "bubblewrap 0.8.0, rootless"), registered("e2", "process", "")],
    )
    ledger = open_ledger("sqlite://")
    try:
        snapshot = collect_status(ledger, None, now=NOW, stream=probe)
    finally:
        ledger.close()
    assert [(e.executor_id, e.isolation) for e in snapshot.executors] == [
        ("e1", "bwrap"),
        ("e2", "process"),
    ]
    assert snapshot.executors[0].registered_age_s == 30
    console = Console(record=True, width=160)
    print_status(snapshot, console)
    text = console.export_text()
    assert "bubblewrap 0.8.0, rootless" in text
    assert "process (UNISOLATED)" in text


async def test_status_and_ops_status_agree_on_every_worker_mid_rollout(
    nats_url: str, tmp_path: Path
) -> None:
    """Mid-rollout, one worker draining: `heddle status` and `heddle ops status` give every
    worker the same state and trajectories (status said every live worker was `silent` with
    0 running while ops status had it draining with 4: heartbeats are not in the ledger)."""
    settings = Settings(nats_url=nats_url, data_dir=tmp_path / "data")
    long = [TraceStep(output_tokens=200_000)]  # a generation of hours: the placement holds
    trace = [TraceTrajectory(id=f"x{i}", prompt_tokens=8, steps=long) for i in range(6)]
    options = InProcessOptions(num_workers=2, engine_options={"time_scale": "1"})
    runner = CliRunner()
    base = ["--nats-url", nats_url, "--data-dir", str(settings.data_dir)]
    async with InProcessDeployment(settings, options), HeddleClient(settings) as client:
        rollout_id = await client.submit(trace=trace)
        ops = await _ops_workers(client.bus, placed=6)
        drained = json.loads(await request(client.bus, ops_subject("worker.drain"),
                                           b'{"worker_id": "w00"}'))  # fmt: skip
        assert drained["ok"]
        ops = await _ops_workers(client.bus, placed=6, draining="w00")
        result = await asyncio.to_thread(runner.invoke, app, [*base, "status", "--json"])
        assert result.exit_code == 0, result.output
        shown = {w["worker_id"]: w for w in json.loads(result.stdout)["workers"]}
        await client.cancel(rollout_id)
    for worker_id, expected in ops.items():
        assert shown[worker_id]["state"] == expected["state"]
        assert shown[worker_id]["num_trajectories"] == expected["num_trajectories"]
        assert shown[worker_id]["heartbeat_age_s"] is not None
    assert shown["w00"]["state"] == "draining" and shown["w00"]["num_trajectories"] > 0


async def _ops_workers(
    bus: Bus, placed: int, draining: str | None = None
) -> dict[str, dict[str, object]]:
    """`heddle.ops.status`'s workers, once ``placed`` trajectories are placed (and ``draining``
    drains) and every worker has been heard from."""
    async with asyncio.timeout(60):
        while True:
            workers = json.loads(await request(bus, ops_subject("status"), b""))["workers"]
            by_id = {w["worker_id"]: w for w in workers}
            is_placed = sum(w["num_trajectories"] for w in workers) == placed
            is_heard = all(w["heartbeat_age_s"] is not None for w in workers)
            is_draining = draining is None or by_id[draining]["state"] == "draining"
            if is_placed and is_heard and is_draining:
                return by_id
            await asyncio.sleep(0.2)
