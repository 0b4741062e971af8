"""Per-identity permissions end to end, against a real nats-server that includes ``heddle deploy
auth``'s config: a rollout completes with every process on its own credential, a worker's
credential is refused what only the control plane and operators may publish, and a refused
publish stops a worker at once instead of being retried."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest

from heddle.bus import Bus, PermissionDenied, PublishDenied
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import Abort, Completed, DeadLettered, Failed, RolloutCancelled
from heddle.events.codec import encode
from heddle.rollout.deployment import LocalDeployment, WorkerPool
from heddle.traces import TraceStep, TraceTrajectory
from heddle.workloads import generate

from .auth_server import AuthServer, auth_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AuthServer]:
    with auth_server(tmp_path) as started:
        yield started


@pytest.fixture
async def operator_bus(server: AuthServer) -> AsyncIterator[Bus]:
    """The operator's connection (its role may create the streams)."""
    async with server.bus("operator") as bus:
        yield bus


async def test_a_connection_without_credentials_is_refused(server: AuthServer) -> None:
    settings = Settings(nats_url=server.server.url, data_dir=server.data_dir)
    # The server answers -ERR 'Authorization Violation' and closes; a client that reads the
    # close before the error sees a reset connection instead.
    with pytest.raises(Exception, match=r"(?i)authorization|connection reset"):
        async with Bus(settings):
            pass


async def test_a_worker_may_not_command_or_cancel(server: AuthServer, operator_bus: Bus) -> None:
    command = Abort(command_id="c1", worker_id="w01", traj_id="t1", issued_at=time.time())
    cancel = RolloutCancelled(
        event_id="e1", rollout_id="Run-A1", occurred_at=time.time(), reason="a worker says so"
    )
    async with server.bus("worker-w00") as worker:
        # The subject is named as the server wrote it (nats-py lowercases its errors).
        with pytest.raises(PublishDenied, match=r"'heddle\.cmd\.worker\.w01\.abort'"):
            await worker.publish(command)
        with pytest.raises(PublishDenied, match=r"'heddle\.evt\.rollout\.Run-A1\.cancelled'"):
            await worker.publish(cancel)
        # Even a hand-over in its own name is refused once it names another sender.
        forged = Abort(
            command_id="c2", worker_id="w01", traj_id="t1", issued_at=time.time(), sent_by="w01"
        )
        with pytest.raises(PublishDenied, match=r"heddle\.cmd\.worker\.w01\.abort\.w01"):
            await worker.publish(forged)
    assert (await operator_bus.publish(command)).sequence == 1


async def test_a_worker_may_not_end_what_it_does_not_hold(
    server: AuthServer, operator_bus: Bus
) -> None:
    """A failure naming no worker, and a dead letter of a submission in the control plane's
    role, would end a trajectory no worker holds (heddle.control.gate): the server refuses both
    to a worker, which still publishes its own failures and dead letters."""
    now = time.time()
    unplaced = Failed(
        event_id="f1", rollout_id="r1", traj_id="t1", occurred_at=now, step=0, reason="forged"
    )
    letter = DeadLettered(
        event_id="d1", rollout_id="r1", occurred_at=now, consumer="control-plane",
        subject="heddle.evt.traj.r1.t2.submitted", stream_sequence=1, reason="forged",
        role="control_plane",
    )  # fmt: skip
    async with server.bus("worker-w00") as worker:
        with pytest.raises(
            PublishDenied, match=r"'heddle\.evt\.traj\.r1\.t1\.failed\.control_plane'"
        ):
            await worker.publish(unplaced)
        with pytest.raises(PublishDenied, match=r"'heddle\.evt\.deadletter\.control_plane'"):
            await worker.publish(letter)
        with pytest.raises(PublishDenied, match=r"'heddle\.evt\.deadletter'"):
            await worker.publish(msgspec.structs.replace(letter, role=""))
        own = msgspec.structs.replace(unplaced, event_id="f2", worker_id="w00")
        assert (await worker.publish(own)).sequence == 1
        mine = msgspec.structs.replace(letter, event_id="d2", role="worker-w00")
        assert (await worker.publish(mine)).sequence == 2
    assert (await operator_bus.stream_state()).last_sequence == 2


async def test_a_worker_may_not_write_in_another_workers_name(
    server: AuthServer, operator_bus: Bus
) -> None:
    """A step event names its worker in its subject: worker w00's credential is refused one
    naming w01 (the holder, say), and one on the bare subject events had before writers were
    named; its own goes through."""
    forged = Completed(
        event_id="c1", rollout_id="r1", traj_id="t1", occurred_at=time.time(), num_steps=1,
        reward=999.0, worker_id="w01",
    )  # fmt: skip
    async with server.bus("worker-w00") as worker:
        with pytest.raises(
            PublishDenied, match=r"'heddle\.evt\.traj\.r1\.t1\.completed\.worker-w01'"
        ):
            await worker.publish(forged)
        with pytest.raises(PublishDenied, match=r"'heddle\.evt\.traj\.r1\.t1\.completed'"):
            await worker.publish_raw("heddle.evt.traj.r1.t1.completed", encode(forged), "c2")
        own = msgspec.structs.replace(forged, event_id="c3", worker_id="w00")
        assert (await worker.publish(own)).sequence == 1
    assert (await operator_bus.stream_state()).last_sequence == 1


async def test_a_rollout_completes_with_a_credential_per_process(
    server: AuthServer, operator_bus: Bus, tmp_path: Path
) -> None:
    from heddle.client import HeddleClient

    deployment = LocalDeployment(operator_bus, tmp_path / "logs", server.credential_files())
    try:
        control = ControlPlaneConfig(
            cost_model="qwen3-8b", predictor=PredictorConfig("noisy_oracle")
        )
        await deployment.start_control_plane(control)
        options = {"time_scale": "200", "model": "qwen3-8b"}
        await deployment.start_workers(WorkerPool(2, "sim", options, heartbeat_s=0.5))
        await deployment.start_tools(1)
        trace = generate("search", 4, seed=3)
        # Submitted with the control plane's credential, as the operations service will: a
        # trainer's own (test_a_trainer_runs_a_rollout_on_its_own_credential) waits for it.
        async with HeddleClient(server.settings("control_plane"), trainer="grpo") as client:
            rollout_id = await client.submit(trace=trace, time_scale=200.0)
            received = [t.traj_id async for t in client.completions(rollout_id)]
            summary = await client.wait(rollout_id, timeout_s=60)
    finally:
        await deployment.stop()
    assert len(received) == len(set(received)) == len(trace)
    assert summary.num_completed == len(trace)
    for log in (tmp_path / "logs").glob("*.log"):
        assert "permissions violation" not in log.read_text().lower(), log.name


async def test_a_trainer_runs_a_rollout_on_its_own_credential(
    server: AuthServer, operator_bus: Bus, tmp_path: Path
) -> None:
    from heddle.client import HeddleClient

    deployment = LocalDeployment(operator_bus, tmp_path / "logs", server.credential_files())
    try:
        await deployment.start_control_plane(ControlPlaneConfig(cost_model="qwen3-8b"))
        options = {"time_scale": "200", "model": "qwen3-8b"}
        await deployment.start_workers(WorkerPool(1, "sim", options, heartbeat_s=0.5))
        await deployment.start_tools(1)
        trace = generate("search", 2, seed=4)
        async with HeddleClient(server.settings("trainer-grpo"), trainer="grpo") as client:
            rollout_id = await client.submit(trace=trace, time_scale=200.0)
            received = [t.traj_id async for t in client.completions(rollout_id)]
            summary = await client.wait(rollout_id, timeout_s=60)
            violations = list(client.bus.violations)
    finally:
        await deployment.stop()
    assert len(received) == len(set(received)) == len(trace)
    assert summary.num_completed == len(trace) and summary.is_finished
    assert violations == []


async def test_a_trainer_submits_and_cancels_its_rollouts_through_the_service(
    server: AuthServer, operator_bus: Bus, tmp_path: Path
) -> None:
    """On trainer grpo's own credential: a rollout submitted (inline, and a large one uploaded
    to its bucket) is stored with grpo as owner at the deployment's time scale, and grpo
    cancels it; the subjects of another trainer's name are refused at once."""
    from heddle.rollout.submission import RolloutPlan, trace_specs
    from heddle.rollout.submit import cancel, submit

    deployment = LocalDeployment(operator_bus, tmp_path / "logs", server.credential_files())
    try:
        await deployment.start_control_plane(ControlPlaneConfig(cost_model="qwen3-8b"))
        options = {"time_scale": "200", "model": "qwen3-8b"}
        await deployment.start_workers(WorkerPool(1, "sim", options, heartbeat_s=0.5))
        long = [TraceStep(output_tokens=100_000)]
        small = [TraceTrajectory(id="a", prompt_tokens=8, steps=long)]
        large = [TraceTrajectory(id=f"b{i}", prompt_tokens=30_000, steps=long) for i in range(4)]
        async with server.bus("trainer-grpo", provision=False) as bus:
            opened = await submit(bus, RolloutPlan("heddle", trace_specs(small)), trainer="grpo")
            uploaded = await submit(bus, RolloutPlan("heddle", trace_specs(large)), trainer="grpo")
            cancelled = await cancel(bus, opened.rollout_id, "done", trainer="grpo")
            with pytest.raises(PermissionDenied, match=r"heddle\.ops\.submit\.ppo"):
                await submit(bus, RolloutPlan("heddle", trace_specs(small)), trainer="ppo")
    finally:
        await deployment.stop()
    assert (opened.trainer, opened.time_scale) == ("grpo", 200.0)
    assert (uploaded.trainer, uploaded.num_trajectories) == ("grpo", 4)
    assert b'"operator":"trainer grpo"' in cancelled


async def test_a_worker_before_the_control_plane_is_told_to_start_it_first(
    server: AuthServer,
) -> None:
    with pytest.raises(PermissionDenied, match=r"HEDDLE_EVENTS.*heddle up"):
        async with server.bus("worker-w00"):
            pass


async def test_a_worker_refused_its_registration_stops_at_once(
    server: AuthServer, operator_bus: Bus, tmp_path: Path
) -> None:
    """Worker w00's credential on a worker that says it is w01: the server refuses its
    registration. A refusal is not a lost connection: the worker stops with the subject named,
    where it used to retry every 2 s forever."""
    settings = server.settings("worker-w00")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "heddle.cli", "--nats-url", settings.nats_url or "",
        "--nats-creds", str(settings.nats_creds), "--data-dir", str(tmp_path / "w"),
        "worker", "--id", "w01", "--engine", "sim",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode != 0
    assert "heddle.evt.worker.w01.registered" in output.decode()
