"""Per-role permissions against a real nats-server that includes ``heddle deploy auth``'s config:
a rollout completes with every process on its own credential, and a worker's credential is
refused what only the control plane and operators may publish."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from heddle.bus import Bus, EmbeddedNatsServer, PermissionDenied, PublishDenied
from heddle.config import Settings
from heddle.consumers import ControlPlaneConfig, PredictorConfig
from heddle.deploy.auth import AUTH_CONFIG_NAME, credential_path, write_auth
from heddle.deploy.roles import ROLE_NAMES
from heddle.events import Abort, RolloutCancelled
from heddle.rollout.deployment import LocalDeployment, WorkerPool
from heddle.workloads import generate


@dataclass(frozen=True)
class AuthServer:
    server: EmbeddedNatsServer
    auth_dir: Path
    data_dir: Path

    def settings(self, role: str) -> Settings:
        return Settings(
            nats_url=self.server.url,
            data_dir=self.data_dir,
            nats_creds=credential_path(self.auth_dir, role),
        )

    def credentials(self) -> dict[str, Path]:
        return {role: credential_path(self.auth_dir, role) for role in ROLE_NAMES}


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[AuthServer]:
    auth_dir = tmp_path / "auth"
    write_auth(auth_dir)
    # nats-server resolves an include relative to the including file: inline the block.
    authorization = (auth_dir / AUTH_CONFIG_NAME).read_text()
    with EmbeddedNatsServer(tmp_path / "nats", extra_config=authorization) as server:
        yield AuthServer(server, auth_dir, tmp_path / "data")


@pytest.fixture
async def operator_bus(auth_server: AuthServer) -> AsyncIterator[Bus]:
    """The operator's connection (its role may create the streams)."""
    async with Bus(auth_server.settings("operator")) as bus:
        yield bus


async def test_a_connection_without_credentials_is_refused(auth_server: AuthServer) -> None:
    settings = Settings(nats_url=auth_server.server.url, data_dir=auth_server.data_dir)
    # The server answers -ERR 'Authorization Violation' and closes; a client that reads the
    # close before the error sees a reset connection instead.
    with pytest.raises(Exception, match=r"(?i)authorization|connection reset"):
        async with Bus(settings):
            pass


async def test_a_worker_may_not_command_or_cancel(
    auth_server: AuthServer, operator_bus: Bus
) -> None:
    command = Abort(command_id="c1", worker_id="w00", traj_id="t1", issued_at=time.time())
    cancel = RolloutCancelled(
        event_id="e1", rollout_id="r1", occurred_at=time.time(), reason="a worker says so"
    )
    async with Bus(auth_server.settings("worker")) as worker:
        with pytest.raises(PublishDenied, match=r"heddle\.cmd\.worker\.w00\.abort"):
            await worker.publish(command)
        with pytest.raises(PublishDenied, match=r"permissions violation"):
            await worker.publish(cancel)
    assert (await operator_bus.publish(command)).sequence == 1


async def test_a_rollout_completes_with_a_credential_per_process(
    auth_server: AuthServer, operator_bus: Bus, tmp_path: Path
) -> None:
    from heddle.client import HeddleClient

    deployment = LocalDeployment(operator_bus, tmp_path / "logs", auth_server.credentials())
    try:
        control = ControlPlaneConfig(
            cost_model="qwen3-8b", predictor=PredictorConfig("noisy_oracle")
        )
        await deployment.start_control_plane(control)
        options = {"time_scale": "200", "model": "qwen3-8b"}
        await deployment.start_workers(WorkerPool(1, "sim", options, heartbeat_s=0.5))
        await deployment.start_tools(1)
        trace = generate("search", 4, seed=3)
        async with HeddleClient(auth_server.settings("trainer"), trainer="grpo") as client:
            rollout_id = await client.submit(trace=trace, time_scale=200.0)
            received = [t.traj_id async for t in client.completions(rollout_id)]
            summary = await client.wait(rollout_id, timeout_s=60)
    finally:
        await deployment.stop()
    assert len(received) == len(set(received)) == len(trace)
    assert summary.num_completed == len(trace)
    for log in (tmp_path / "logs").glob("*.log"):
        assert "permissions violation" not in log.read_text().lower(), log.name


async def test_a_worker_before_the_control_plane_is_told_to_start_it_first(
    auth_server: AuthServer,
) -> None:
    with pytest.raises(PermissionDenied, match=r"HEDDLE_EVENTS.*heddle up"):
        async with Bus(auth_server.settings("worker")):
            pass
