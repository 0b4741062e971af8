"""Submissions through the operations service (a control plane in process, a real nats-server):
a good one opens its rollout with the deployment's time scale and its trainer as owner, a retry
gets the first reply and stores nothing twice, a large one goes through the upload bucket whole,
and every kind of bad one is refused with its reason before any event of it exists."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from heddle.bus import Bus, ReplayQuery
from heddle.bus.micro import ServiceRefusal, request
from heddle.cli import app
from heddle.config import Settings
from heddle.control.submit_requests import SubmitRequest, encode_submission, upload_bucket
from heddle.controlplane import ControlPlaneConfig, ControlPlaneService
from heddle.controlplane.operations import ops_subject, trainer_cancel_subject
from heddle.controlplane.submissions import submit_subject
from heddle.events import (
    RolloutSubmitted,
    TrajectorySpec,
    TrajectorySubmitted,
    WorkerRegistered,
)
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.rollout.submit import SubmissionRefused, cancel, submit
from heddle.traces import TraceStep, TraceTrajectory
from heddle.workers.environments import validate_task

pytestmark = pytest.mark.timeout(180)

TIME_SCALE = 50.0
MODEL_CONTEXT = 32768


@pytest.fixture
async def bus(nats_url: str, tmp_path: Path) -> AsyncIterator[Bus]:
    """A running control plane (no ledger) that knows worker w0 (time scale 50, a model of
    32,768 tokens); the bus to talk to it."""
    settings = Settings(nats_url=nats_url, data_dir=tmp_path)
    config = ControlPlaneConfig(project_ledger=False, learn_from_ledger=False)
    service = ControlPlaneService(settings, config, check_task=validate_task)
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    try:
        await asyncio.wait_for(service.ready.wait(), timeout=60)
        async with Bus(settings) as bus:
            await bus.publish(
                WorkerRegistered(
                    event_id="w0:reg", occurred_at=1e10, worker_id="w0", engine="sim",
                    time_scale=TIME_SCALE, max_context_tokens=MODEL_CONTEXT,
                )
            )  # fmt: skip
            await _until_worker_known(bus)
            yield bus
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=30)


async def _until_worker_known(bus: Bus) -> None:
    async with asyncio.timeout(30):
        while True:
            status = json.loads(await request(bus, ops_subject("status"), b""))
            if status["workers"]:
                return
            await asyncio.sleep(0.1)


async def _until_state(bus: Bus, rollout_id: str, state: str) -> None:
    """Until the control plane's view has the rollout in ``state``."""
    body = json.dumps({"rollout_id": rollout_id}).encode()
    async with asyncio.timeout(30):
        while True:
            reply = json.loads(await request(bus, ops_subject("rollout.info"), body))
            if reply["state"] == state:
                return
            await asyncio.sleep(0.1)


def line(traj_id: str, *, tool_s: float = 1.0, prompt_tokens: int = 20) -> TraceTrajectory:
    steps = [
        TraceStep(output_tokens=8, tool_s=tool_s, tool_output_tokens=4),
        TraceStep(output_tokens=4),
    ]
    return TraceTrajectory(id=traj_id, group="g", prompt_tokens=prompt_tokens, steps=steps)


def plan(num: int = 3) -> RolloutPlan:
    return RolloutPlan("heddle", trace_specs([line(f"a{i}") for i in range(num)]), "trace")


async def submitted_events(bus: Bus, rollout_id: str) -> list[Any]:
    """The rollout's submission events (the control plane's decisions that follow left out)."""
    subjects = (
        f"heddle.evt.rollout.{rollout_id}.submitted",
        f"heddle.evt.traj.{rollout_id}.*.submitted",
    )
    query = ReplayQuery(filter_subjects=subjects, start_sequence=1)
    return [r.message async for r in bus.replay_events(query)]


async def test_a_submission_opens_its_rollout_owned_by_its_trainer(bus: Bus) -> None:
    reply = await submit(bus, plan(3), "r-good", trainer="grpo")
    assert (reply.rollout_id, reply.num_trajectories, reply.trainer) == ("r-good", 3, "grpo")
    assert reply.time_scale == TIME_SCALE  # the deployment's, not 1.0
    events = await submitted_events(bus, "r-good")
    opened = [e for e in events if isinstance(e, RolloutSubmitted)]
    assert len(opened) == 1 and opened[0].trainer == "grpo"
    assert opened[0].time_scale == TIME_SCALE
    assert [e.traj_id for e in events if isinstance(e, TrajectorySubmitted)] == [
        "t000000", "t000001", "t000002",
    ]  # fmt: skip


async def test_a_retry_gets_the_first_reply_and_stores_nothing_twice(bus: Bus) -> None:
    first = await submit(bus, plan(2), "r-retry", trainer="grpo")
    again = await submit(bus, plan(2), "r-retry", trainer="grpo")
    assert again == first
    assert len(await submitted_events(bus, "r-retry")) == 3
    with pytest.raises(SubmissionRefused) as stolen:
        await submit(bus, plan(2), "r-retry", trainer="other")
    assert stolen.value.code == 403 and "grpo" in str(stolen.value)
    with pytest.raises(SubmissionRefused) as changed:
        await submit(bus, plan(5), "r-retry", trainer="grpo")
    assert changed.value.code == 409


async def test_a_different_time_scale_is_refused(bus: Bus) -> None:
    wrong = RolloutPlan("heddle", plan(1).specs, "trace", time_scale=20.0)
    with pytest.raises(SubmissionRefused, match=r"time_scale 20 differs from the deployment's 50"):
        await submit(bus, wrong, "r-scale", trainer="grpo")
    assert await submitted_events(bus, "r-scale") == []


def _spec(**changes: Any) -> dict[str, Any]:
    spec = msgspec.to_builtins(trace_specs([line("x")])[0])
    spec.update(changes)
    return spec


def _body(*specs: dict[str, Any], **fields: Any) -> bytes:
    return json.dumps({"rollout_id": "r-bad", "trajectories": list(specs), **fields}).encode()


math_task = {"question": "1+1?", "answer": 2}
BAD: list[tuple[str, bytes, str, str]] = [
    ("unknown field", _body(_spec(max_stepz=3)), "400", "unknown field trajectories[0].max_stepz"),
    ("unknown top field", _body(_spec(), policyy="x"), "400", "unknown field policyy"),
    ("unknown task field", _body(_spec(environment="math", task={**math_task, "questio": 1})),
     "400", "unknown field `questio`"),
    ("unknown policy", _body(_spec(), policy="nope"), "400", "unknown policy"),
    ("out of order", _body(_spec(index=3)), "400", "index: 3"),
    ("tool_s 1e12", _body(_spec(task={**_spec()["task"], "steps": [{"output_tokens": 1,
     "tool_s": 1e12}]})), "400", "tool_s"),
    ("huge integer", _body(_spec(max_steps=10**30)), "400", "max_steps"),
    ("prompt over the model", _body(_spec(environment="math", task=math_task,
     prompt_token_ids=[7] * 40000, max_total_tokens=131072)), "400", "context of 32768"),
    ("no room", _body(_spec(prompt_token_ids=[7] * 50, max_total_tokens=50)), "400", "no room"),
    ("bad temperature", _body(_spec(sampling={"temperature": -1})), "400", "temperature"),
    ("empty", _body(), "400", "1 to"),
    ("bad id", _body(_spec(), rollout_id="has space"), "400", "rollout id"),
    ("malformed", b"{nope", "400", "malformed JSON"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "body", "code", "fragment"), BAD, ids=[b[0] for b in BAD])
async def test_a_bad_submission_is_refused_before_its_rollout_exists(
    bus: Bus, what: str, body: bytes, code: str, fragment: str
) -> None:
    with pytest.raises(ServiceRefusal) as refused:
        await request(bus, submit_subject("grpo"), body, timeout_s=30)
    assert refused.value.code == code and fragment in refused.value.message, refused.value.message
    assert await submitted_events(bus, "r-bad") == []


async def test_an_oversized_trajectory_is_refused_whole(bus: Bus) -> None:
    """A 2 MB trace line (its text is the trace task, which no array offload can move): the
    upload arrives, the service refuses it, and none of the rollout exists (it used to stay
    "running 0/2" forever, its trajectory dead-lettered)."""
    steps = [TraceStep(output_tokens=4, output_text="y" * 2_000_000)]
    huge = TraceTrajectory(id="huge", prompt_tokens=10, steps=steps)
    specs = trace_specs([line("small"), huge])
    with pytest.raises(SubmissionRefused, match=r"trajectory 1 .*more than one event holds"):
        await submit(bus, RolloutPlan("heddle", specs, "trace"), "r-huge", trainer="grpo")
    assert await submitted_events(bus, "r-huge") == []


async def test_a_large_submission_is_uploaded_and_stored_whole(bus: Bus) -> None:
    """Four 30k-token prompts (the model takes 32,768): 480 KB of ids, over a request's size."""
    rng = random.Random(7)  # random ids do not compress: 4 x 30,000 x 4 bytes
    prompts = [[rng.randrange(50_000) for _ in range(30_000)] for _ in range(4)]
    specs = [
        TrajectorySpec(group_id=f"g{i}", index=i, environment="math", task=math_task,
                       prompt_token_ids=prompt, max_total_tokens=32_000)
        for i, prompt in enumerate(prompts)
    ]  # fmt: skip
    body = encode_submission(SubmitRequest(rollout_id="r-large", trajectories=specs))
    assert len(body) > 256 * 1024  # uploaded, not inline
    reply = await submit(bus, RolloutPlan("heddle", specs, "tasks"), "r-large", trainer="grpo")
    assert reply.num_trajectories == 4
    stored = [
        e for e in await submitted_events(bus, "r-large") if isinstance(e, TrajectorySubmitted)
    ]
    resolved = [await bus.resolve(e) for e in stored]
    assert [list(e.spec.prompt_token_ids) for e in resolved] == prompts
    assert await bus.bucket_object_names(upload_bucket("grpo")) == []  # the upload was taken


async def test_a_trainer_cancels_only_its_own_rollouts(bus: Bus) -> None:
    await submit(bus, plan(1), "r-owned", trainer="grpo")
    with pytest.raises(ServiceRefusal) as refused:
        await request(bus, trainer_cancel_subject("other"), b'{"rollout_id":"r-owned"}')
    assert refused.value.code == "403"
    body = b'{"rollout_id":"r-owned","request_id":"once"}'
    first = await request(bus, trainer_cancel_subject("grpo"), body)
    assert json.loads(first)["operator"] == "trainer grpo"
    assert await request(bus, trainer_cancel_subject("grpo"), body) == first  # not 409


async def test_heddle_rollout_cancel_goes_through_the_service(bus: Bus) -> None:
    await submit(bus, plan(1), "r-cli", trainer="grpo")
    runner = CliRunner()
    base = ["--nats-url", bus.url, "--data-dir", str(bus.settings.data_dir), "rollout", "cancel"]
    unknown = await asyncio.to_thread(runner.invoke, app, [*base, "r-nosuch"])
    assert unknown.exit_code != 0 and "unknown rollout" in unknown.output
    ok = await asyncio.to_thread(runner.invoke, app, [*base, "r-cli", "--reason", "test"])
    assert ok.exit_code == 0, ok.output
    await _until_state(bus, "r-cli", "cancelled")
    again = await asyncio.to_thread(runner.invoke, app, [*base, "r-cli"])
    assert again.exit_code != 0 and "has cancelled" in again.output
    with pytest.raises(SubmissionRefused) as refused:
        await cancel(bus, "r-cli", "twice")
    assert refused.value.code == 409
