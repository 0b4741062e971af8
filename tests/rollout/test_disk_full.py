"""A full disk under the embedded nats-server's JetStream store (a real tmpfs, filled to
ENOSPC mid-rollout): the control plane reports it (its status file, ``heddle status``, the
``heddle_stream_store_writable`` gauge), producers pause, and once the space is freed the
deployment resumes by itself (JetStream reset, no server restart) and the rollout ends with
every trajectory completed exactly once. Without the reset the stream refuses writes until
nats-server restarts, and the rollout never ends."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner
from waiting import until

from heddle.bench.small_disk import NoSmallDisk, SmallDisk
from heddle.bus import ReplayQuery
from heddle.cli.apps import app
from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.controlplane.store_guard import StoreGuardConfig
from heddle.events import Completed
from heddle.events.subjects import trajectory_subjects
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.traces import TraceStep, TraceTrajectory

TIME_SCALE = 50.0
STORE_BYTES = 48 << 20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    disk = SmallDisk(tmp_path / "data" / "jetstream", STORE_BYTES)
    try:
        disk.mount()
    except NoSmallDisk as exc:
        pytest.skip(str(exc))
    try:
        yield disk
    finally:
        disk.unmount()


def trace(num: int) -> list[TraceTrajectory]:
    steps = [TraceStep(output_tokens=200, tool_s=5.0, tool_output_tokens=20) for _ in range(4)]
    return [
        TraceTrajectory(id=f"x{i}", group=f"p{i}", prompt_tokens=50, steps=steps)
        for i in range(num)
    ]


def writable(plane: InProcessDeployment) -> bool | None:
    guard = plane.service.store_guard
    return guard.report.is_writable if guard is not None else None


async def test_a_full_disk_is_reported_and_survived(small_disk: SmallDisk, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")  # the embedded server, store on the tmpfs
    control = ControlPlaneConfig(
        cost_model="qwen3-8b",
        predictor=PredictorConfig("oracle"),
        store=StoreGuardConfig(interval_s=0.5, reset_backoff_s=2.0),
    )
    options = InProcessOptions(
        num_workers=2,
        engine_options={"time_scale": str(TIME_SCALE), "model": "qwen3-8b"},
        control_plane=control,
    )
    async with InProcessDeployment(settings, options) as plane:
        async with HeddleClient(settings, trainer="disk") as client:
            rollout_id = await client.submit(trace=trace(6), policy="heddle", time_scale=TIME_SCALE)
            small_disk.fill()
            await until(lambda: writable(plane) is False, "the refusal reported", 120)
            metrics = plane.service.metrics.registry
            assert metrics.get_sample_value("heddle_stream_store_writable") == 0
            command = ["--data-dir", str(settings.data_dir), "status", "--no-nats"]
            await until(lambda: "REFUSES WRITES" in _status_text(command), "status says so", 60)
            small_disk.free()
            summary = await client.wait(rollout_id, timeout_s=300)
            received = [t.traj_id async for t in client.completions(rollout_id)]
        guard = plane.service.store_guard
        assert guard is not None and guard.report.is_writable and guard.report.num_resets >= 1
        assert metrics.get_sample_value("heddle_stream_store_resets_total") >= 1
        async with HeddleClient(settings, trainer="count") as counter:
            query = ReplayQuery(filter_subjects=trajectory_subjects(rollout_id, "*", "completed"))
            completed = Counter(
                [
                    record.message.traj_id
                    async for record in counter.bus.replay_events(query)
                    if isinstance(record.message, Completed)
                ]
            )
    assert summary.num_completed == 6 and summary.is_finished
    assert sorted(received) == [f"t{i:06d}" for i in range(6)]
    assert set(completed.values()) == {1}, completed


def _status_text(command: list[str]) -> str:
    return " ".join(CliRunner().invoke(app, command).output.split())
