"""docs/trainer.md's "Any language" path, run as a non-Python trainer would: nothing of heddle
on the trainer's side, only raw nats-py calls the doc names (a request to the operations
service, a durable pull consumer, explicit acks, the array encodings), against a whole Heddle in
one process. Chat messages and token ids are both accepted; the trainer's delivery stream
carries each trajectory's terminal record once (with its reason, group and index), then the
rollout's end; a cancelled rollout's terminal events are the ones the doc lists."""

from __future__ import annotations

import asyncio
import base64
import json
import zlib
from pathlib import Path
from typing import Any

import nats
import numpy as np
import pytest
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import NotFoundError

from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions

TIME_SCALE = 300.0
DTYPES = {"i32le": "<i4", "f32le": "<f4", "u8": "u1"}


def array(field: Any) -> list[float]:
    """The doc's decoder for one array field (inline forms; these trajectories are small)."""
    if isinstance(field, list):
        return field
    raw = base64.b64decode(field["data"])
    kind, layout = field["enc"].split("-", 1)
    dtype = np.dtype(DTYPES[layout])
    if kind == "b64z":
        planes = np.frombuffer(zlib.decompress(raw), np.uint8)
        raw = planes.reshape(dtype.itemsize, field["n"]).T.tobytes()
    return np.frombuffer(raw, dtype).tolist()


async def submit(nc: Any, rid: str, trajectories: list[dict[str, Any]]) -> dict[str, Any]:
    """As the doc says: one request to ``heddle.ops.submit.<trainer>``; the service's reply
    (its time scale is the deployment's)."""
    body = {
        "rollout_id": rid,
        "policy": "heddle",
        "trajectories": [{"index": index, **spec} for index, spec in enumerate(trajectories)],
    }
    reply = await nc.request("heddle.ops.submit.raw", json.dumps(body).encode(), timeout=30)
    assert "Nats-Service-Error" not in (reply.headers or {}), reply.headers
    return json.loads(reply.data)  # type: ignore[no-any-return]


async def delivery_stream(js: Any) -> str:
    """The trainer's stream, once the control plane made it (at its first submission)."""
    stream = "HEDDLE_OUT_raw"
    async with asyncio.timeout(30):
        while True:
            try:
                await js.stream_info(stream)
                return stream
            except NotFoundError:
                await asyncio.sleep(0.2)


async def receive(
    js: Any, rid: str, count: int
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each trajectory's terminal record and the rollout's end, through a durable pull
    consumer on the trainer's delivery stream."""
    stream = await delivery_stream(js)
    config = ConsumerConfig(
        durable_name=f"trainer-raw-{rid}",
        ack_policy=AckPolicy.EXPLICIT,
        filter_subjects=[f"heddle.out.raw.{rid}.>"],
    )
    await js.add_consumer(stream, config)
    sub = await js.pull_subscribe_bind(f"trainer-raw-{rid}", stream=stream)
    ended: dict[str, dict[str, Any]] = {}
    end: dict[str, Any] = {}
    async with asyncio.timeout(60):
        while len(ended) < count or not end:
            try:
                messages = await sub.fetch(16, timeout=1)
            except nats.errors.TimeoutError:
                continue
            for msg in messages:
                event = json.loads(msg.data)
                if event["kind"].startswith("rollout."):
                    end = event
                else:
                    assert event["traj_id"] not in ended  # once each
                    ended[event["traj_id"]] = {**event, "subject": msg.subject}
                await msg.ack()
    return ended, end


def math_task(index: int) -> dict[str, Any]:
    return {"group_id": f"g{index // 2}", "environment": "math",
            "task": {"question": f"{index} + 1?", "answer": index + 1},
            "max_steps": 2, "max_new_tokens": 24, "max_total_tokens": 4096}  # fmt: skip


@pytest.fixture
def settings(nats_url: str, tmp_path: Path) -> Settings:
    return Settings(nats_url=nats_url, data_dir=tmp_path / "data")


async def test_a_raw_nats_trainer_submits_receives_and_sees_the_end(settings: Settings) -> None:
    control = ControlPlaneConfig(cost_model="qwen3-8b", predictor=PredictorConfig("oracle"))
    options = InProcessOptions(
        num_workers=2, engine_options={"time_scale": str(TIME_SCALE)}, control_plane=control
    )
    async with InProcessDeployment(settings, options):
        nc = await nats.connect(settings.nats_url)
        js = nc.jetstream()
        try:
            chat = [{"role": "user", "content": "What is 2 + 2?"}]
            trajectories = [
                {**math_task(0), "messages": chat},
                {**math_task(1), "messages": chat},
                {**math_task(2), "prompt_token_ids": [72, 105, 33]},
                {**math_task(3), "prompt_token_ids": [72, 105, 70000]},  # not in the vocabulary
            ]
            opened = await submit(nc, "raw1", trajectories)
            ended, summary = await receive(js, "raw1", len(trajectories))
            cancel_ends = await cancelled_rollout(nc, js)
            typo = {"index": 0, **math_task(0), "max_stepz": 1}
            body = json.dumps({"rollout_id": "raw3", "trajectories": [typo]}).encode()
            refused = await nc.request("heddle.ops.submit.raw", body, timeout=30)
        finally:
            await nc.close()
    assert (opened["rollout_id"], opened["trainer"], opened["time_scale"]) == (
        "raw1", "raw", TIME_SCALE,
    )  # fmt: skip
    assert refused.headers["Nats-Service-Error-Code"] == "400"
    assert "max_stepz" in refused.headers["Nats-Service-Error"]
    assert sorted(ended) == [f"t{i:06d}" for i in range(4)]
    for index in range(3):
        done = ended[f"t{index:06d}"]
        assert done["kind"] == "traj.completed"
        assert (done["group_id"], done["index"]) == (f"g{index // 2}", index)
        assert done["finish_reason"] in {"stop", "length", "max_steps"}
        response, mask = array(done["response_token_ids"]), array(done["loss_mask"])
        assert len(response) == len(mask) == len(array(done["logprob_mask"])) > 0
    prompt = array(ended["t000000"]["prompt_token_ids"])
    assert bytes(int(i) for i in prompt) == b"<|user|>\nWhat is 2 + 2?\n<|assistant|>\n"
    assert array(ended["t000002"]["prompt_token_ids"]) == [72, 105, 33]
    bad = ended["t000003"]
    # a failure comes on its own subject as the record a trainer batches, built from its events
    assert bad["subject"] == "heddle.out.raw.raw1.t000003.failed"
    assert bad["kind"] == "traj.completed" and bad["finish_reason"] == "error"
    assert bad["reward"] == 0.0
    assert "70000" in bad["reason"] and (bad["group_id"], bad["index"]) == ("g1", 3)
    assert summary["kind"] == "rollout.finished"
    assert (summary["num_completed"], summary["num_failed"]) == (3, 1)
    rollout_kinds, trajectory_ends = cancel_ends
    # the operator event, then the end: never a rollout.finished as well
    assert rollout_kinds == ["rollout.submitted", "rollout.cancel_requested", "rollout.cancelled"]
    assert {e["finish_reason"] for e in trajectory_ends.values()} == {"aborted"}


async def cancelled_rollout(nc: Any, js: Any) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Cancel a running rollout through the operations service; the rollout's own events and
    every trajectory's terminal event once all ended."""
    long = {"output_tokens": 100_000}
    trace = {"environment": "trace", "max_steps": 1, "max_new_tokens": 100_000}
    specs = [{**trace, "group_id": f"x{i}", "task": {"id": f"x{i}", "prompt_tokens": 8,
              "steps": [long]}} for i in range(3)]  # fmt: skip
    await submit(nc, "raw2", specs)
    await (await js.subscribe("heddle.evt.traj.raw2.*.generation_started.*")).next_msg(60)
    reply = await nc.request("heddle.ops.rollout.cancel", b'{"rollout_id": "raw2"}', timeout=60)
    assert "error" not in json.loads(reply.data)
    ends, end = await receive(js, "raw2", len(specs))
    assert end["kind"] == "rollout.cancelled"
    sub = await js.subscribe("heddle.evt.rollout.raw2.>", ordered_consumer=True)
    kinds: list[str] = []
    # Up to the end (waited for: a loaded machine delivers late), then whatever follows it
    # within a few seconds (what the control plane would still publish about the rollout).
    while "rollout.cancelled" not in kinds:
        kinds.append(json.loads((await sub.next_msg(timeout=60)).data)["kind"])
    while True:
        try:
            kinds.append(json.loads((await sub.next_msg(timeout=3)).data)["kind"])
        except nats.errors.TimeoutError:
            return kinds, ends
