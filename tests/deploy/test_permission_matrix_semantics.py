"""What each identity's role allows, done for real on a nats-server with ``heddle deploy auth``'s
config: a worker takes its commands, hands a trajectory to its peer, replays trajectory events
and uses the buckets; a trainer reads and acknowledges its own records; the projector drives
its durable; each consumer dead-letters on its own role's subject; the weights publisher
announces weights and reads the load reports. And what the findings of issue 35 did with a
worker's credential, with the real ``nats`` CLI: deleting the control plane's durable, now
refused."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.js import api

from heddle.bus import Bus, ConsumerSpec, Delivery
from heddle.bus.objects import PAYLOADS_BUCKET, Objects
from heddle.deploy.roles import CONTROL_DURABLE, trainer_stream
from heddle.events import (
    Generated,
    MigrateIn,
    StartTrajectory,
    TrajectorySpec,
    WeightsLoaded,
    decode_event,
    decode_tool_call,
    decode_worker_command,
)
from heddle.events.subjects import DEADLETTER_SUBJECT, EVENTS_STREAM
from heddle.ledger import LEDGER_CONSUMER
from heddle.weights import WEIGHTS_BUCKET, publish_weights, weights_reports
from heddle.workers.agent import WorkerConfig, records
from heddle.workers.agent.trajectory_log import TrajectoryLog
from heddle.workers.agent.transport import BusPorts, command_consumer
from heddle.workers.tools.executor import ExecutorConfig, tool_consumer_spec

from .auth_server import TRAINERS, AuthServer, auth_server

SPEC = TrajectorySpec(group_id="g", index=0, environment="trace", prompt_token_ids=[1, 2])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AuthServer]:
    with auth_server(tmp_path) as started:
        yield started


@pytest.fixture
async def control(server: AuthServer) -> AsyncIterator[Bus]:
    """The control plane's connection: it creates the streams, its durable and (as the issue
    39 work will) each trainer's stream of records."""
    async with server.bus("control_plane") as bus:
        for trainer in TRAINERS:
            config = api.StreamConfig(
                name=trainer_stream(trainer), subjects=[f"heddle.out.{trainer}.>"]
            )
            await bus.js.add_stream(config)
        spec = ConsumerSpec(CONTROL_DURABLE, EVENTS_STREAM, ("heddle.evt.>",), role="control_plane")
        await bus.js.add_consumer(EVENTS_STREAM, spec.config())
        yield bus


async def take(bus: Bus, spec: ConsumerSpec, decode: object) -> list[Delivery[object]]:
    """Everything ``spec``'s durable delivers now, acknowledged."""
    taken: list[Delivery[object]] = []

    async def handle(batch: list[Delivery[object]]) -> None:
        taken.extend(batch)

    runner = bus.batch_runner(spec, decode, handle)  # type: ignore[arg-type]
    await asyncio.wait_for(runner.run(until_idle=True), timeout=60)
    return taken


async def test_a_worker_does_its_work_on_its_own_credential(
    server: AuthServer, control: Bus
) -> None:
    start = StartTrajectory(
        command_id="c1", rollout_id="r1", issued_at=time.time(), worker_id="w00",
        traj_id="t1", spec=SPEC,
    )  # fmt: skip
    await control.publish(start)
    async with server.bus("worker-w00") as w00, server.bus("worker-w01") as w01:
        commands = await take(w00, command_consumer(WorkerConfig("w00")), decode_worker_command)
        assert [d.message for d in commands] == [start]
        generated = Generated(
            event_id="g1", rollout_id="r1", traj_id="t1", occurred_at=time.time(), step=0,
            worker_id="w00", output_token_ids=[5, 6],
        )  # fmt: skip
        await w00.publish(generated)
        # Its hand-over to a peer, exactly as its code builds it, reaches the peer.
        log = TrajectoryLog(rollout_id="r1", traj_id="t1", spec=SPEC)
        hand_over = records.migrate_in(
            log, spec=SPEC, source_worker_id="w00", target_worker_id="w01",
            migration_id="m1", cache_key="", priority=1.0, now=time.time(),
        )  # fmt: skip
        await w00.publish(hand_over)
        received = await take(w01, command_consumer(WorkerConfig("w01")), decode_worker_command)
        assert [d.message for d in received] == [hand_over]
        assert isinstance(received[0].message, MigrateIn)
        # Trajectory history (a resume), and the buckets it uses.
        history = await BusPorts(w00).trajectory_events("r1", "t1")
        assert [e.event_id for e in history] == ["g1"]
        payloads = Objects(w00.js, PAYLOADS_BUCKET)
        for _ in range(2):  # the second is a retried offload: nothing replaced, no purge
            await payloads.put_once("r1/g1/output_token_ids", b"x" * 1000)
        await w00.put_object("kv-m1", b"cache")
        assert await w01.get_object("kv-m1") == b"cache"
        await w01.delete_object("kv-m1")
    assert await control.consumer_state(EVENTS_STREAM, CONTROL_DURABLE) is not None


async def test_each_consumer_dead_letters_on_its_own_roles_subject(
    server: AuthServer, control: Bus
) -> None:
    """A worker's, the tool executors' and the projector's runners dead-letter what they
    cannot read under their own credentials, each on ``heddle.evt.deadletter.<its role>``."""
    await control.publish_raw("heddle.cmd.worker.w00.run", b"{not json", "bad-command")
    await control.publish_raw("heddle.cmd.tool.default", b"{not json", "bad-call")
    await control.publish_raw("heddle.evt.traj.r1.t1.generated", b"{not json", "bad-event")
    tools = ExecutorConfig(pool="default", executor_id="x0")
    readers = [
        ("worker-w00", command_consumer(WorkerConfig("w00")), decode_worker_command),
        ("tool_executor", tool_consumer_spec(tools), decode_tool_call),
        ("ledger_projector", ConsumerSpec(
            LEDGER_CONSUMER, EVENTS_STREAM, ("heddle.evt.traj.>",), role="ledger_projector"
        ), decode_event),
    ]  # fmt: skip
    for label, spec, decode in readers:
        async with server.bus(label) as bus:
            assert await take(bus, spec, decode) == []
            assert not bus.violations, label
    info = await control.js.stream_info(EVENTS_STREAM, subjects_filter=DEADLETTER_SUBJECT)
    assert info.state.subjects == {
        "heddle.evt.deadletter.worker-w00": 1,
        "heddle.evt.deadletter.tool_executor": 1,
        "heddle.evt.deadletter.ledger_projector": 1,
    }


async def test_a_trainer_reads_and_acknowledges_its_own_records(
    server: AuthServer, control: Bus
) -> None:
    await control.publish_raw("heddle.out.grpo.r1.t1.completed", b'{"n": 1}', "o1")
    await control.publish_raw("heddle.out.ppo.r2.t1.completed", b'{"n": 2}', "o2")
    await Objects(control.js, PAYLOADS_BUCKET).put_once("r1/o1/response", b"tokens")
    async with server.bus("trainer-grpo", provision=False) as trainer:
        spec = ConsumerSpec(
            "grpo-r1", trainer_stream("grpo"), ("heddle.out.grpo.r1.>",), role="trainer-grpo"
        )
        taken = await take(trainer, spec, bytes)
        assert [d.message for d in taken] == [b'{"n": 1}']
        state = await trainer.consumer_state(trainer_stream("grpo"), "grpo-r1")
        assert state is not None and state.ack_floor_sequence == 1
        assert await Objects(trainer.js, PAYLOADS_BUCKET).get("r1/o1/response") == b"tokens"
        # Its own endpoint of the operations service: no service answers here, but the server
        # lets the request through (a refused one would name the subject).
        with pytest.raises(Exception, match=r"(?i)no responders"):
            await trainer.client.request("heddle.ops.submit.grpo", b"{}", timeout=5)
        assert not trainer.violations


async def test_the_projector_drives_its_own_durable(server: AuthServer, control: Bus) -> None:
    event = Generated(
        event_id="g1", rollout_id="r1", traj_id="t1", occurred_at=time.time(), step=0,
        worker_id="w00", output_token_ids=[5],
    )  # fmt: skip
    await control.publish(event)
    async with server.bus("ledger_projector") as projector:
        spec = ConsumerSpec(
            LEDGER_CONSUMER, EVENTS_STREAM, ("heddle.evt.>",), role="ledger_projector", ack_all=True
        )
        taken = await take(projector, spec, decode_event)
        assert [d.message for d in taken] == [event]
        assert await projector.stream_message(EVENTS_STREAM, 1) is not None


async def test_the_weights_publisher_announces_weights_and_reads_the_reports(
    server: AuthServer, control: Bus
) -> None:
    async with server.bus("weights_publisher") as publisher, server.bus("worker-w00") as w00:
        published = await publish_weights(publisher, 1, b"state dict")
        assert published.source.bucket == WEIGHTS_BUCKET
        assert await w00.get_bucket_object(WEIGHTS_BUCKET, "v1") == b"state dict"
        loaded = WeightsLoaded(
            event_id="l1", occurred_at=time.time(), weight_version=1, worker_id="w00"
        )
        await w00.publish(loaded)
        reports, failures = await weights_reports(publisher, 1)
        assert list(reports) == ["w00"] and not failures
        await publish_weights(publisher, 1, b"state dict, again")  # replaced: it may purge


NATS_CLI = shutil.which("nats")


@pytest.mark.skipif(
    NATS_CLI is None and not os.environ.get("HEDDLE_REQUIRE_NATS_CLI"),
    reason="the nats CLI is not installed (.ci/run installs it)",
)
async def test_the_nats_cli_with_a_worker_credential_cannot_delete_the_control_durable(
    server: AuthServer, control: Bus
) -> None:
    worker = server.credentials["worker-w00"]
    command = [
        NATS_CLI or "nats", "--server", server.server.url,
        "--nkey", str(server.path("worker-w00")),
        "--inbox-prefix", f"_INBOX.{worker.public_key}", "--timeout", "3s",
        "consumer", "rm", EVENTS_STREAM, CONTROL_DURABLE, "-f",
    ]  # fmt: skip
    result = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    assert result.returncode != 0, result.stdout
    assert await control.consumer_state(EVENTS_STREAM, CONTROL_DURABLE) is not None
    operator = [
        *command[:3], "--nkey", str(server.path("operator")), "--timeout", "10s",
        *command[-5:],
    ]  # fmt: skip
    result = await asyncio.to_thread(subprocess.run, operator, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr  # operators stay as they were
