"""Offloaded arrays: an event over the limit keeps its big arrays in the object store, readers
get them back with their digest checked, an unresolved event re-encodes as the same reference,
and a rollout's objects are deleted with it."""

from __future__ import annotations

import asyncio
import json
import random
import struct
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from heddle.bus import PAYLOADS_BUCKET, Bus, PayloadError, ReplayQuery
from heddle.bus.objects import Objects
from heddle.config import Settings
from heddle.events import Completed, Generated, decode_event, encode
from heddle.events.arrays import num_items, unresolved
from heddle.events.subjects import trajectory_subject
from heddle.ledger.lean_decoder import decode_event_lean

NUM_TOKENS = 4096


def token_ids(num_tokens: int) -> list[int]:
    """Ids spread over a vocabulary: they compress little (``range`` would shrink to nothing)."""
    rng = random.Random(7)
    return [rng.randrange(151_936) for _ in range(num_tokens)]


def logprobs(num_tokens: int) -> list[float]:
    """float32 values, as engines return them (the wire keeps them exactly)."""
    rng = random.Random(8)
    values = [-rng.expovariate(1.5) for _ in range(num_tokens)]
    return list(struct.unpack(f"<{num_tokens}f", struct.pack(f"<{num_tokens}f", *values)))


@pytest.fixture
def settings(nats_url: str, tmp_path: Path) -> Settings:
    return replace(Settings(nats_url=nats_url, data_dir=tmp_path / "data"), max_event_bytes=8192)


def completed(rollout_id: str, traj_id: str = "t000000") -> Completed:
    return Completed(
        event_id=f"{rollout_id}:{traj_id}:completed",
        rollout_id=rollout_id,
        traj_id=traj_id,
        occurred_at=1.0,
        num_steps=1,
        prompt_token_ids=list(range(10, 30)),
        response_token_ids=token_ids(NUM_TOKENS),
        response_logprobs=logprobs(NUM_TOKENS),
        loss_mask=[1] * NUM_TOKENS,
        num_output_tokens=NUM_TOKENS,
    )


async def stored(bus: Bus, rollout_id: str) -> list[bytes]:
    query = ReplayQuery(filter_subjects=(trajectory_subject(rollout_id, "*", ">"),))
    return [r.message async for batch in bus.replay(query, bytes).batches() for r in batch]


async def test_a_large_event_round_trips_through_the_object_store(settings: Settings) -> None:
    event = completed("r1")
    async with Bus(settings) as bus:
        await bus.publish(event)
        [data] = await stored(bus, "r1")
        decoded = decode_event(data)
        resolved = await bus.resolve(decoded)
    assert len(data) <= settings.max_event_bytes < len(encode(event))
    field = json.loads(data)["response_token_ids"]
    assert field["ref"]["bucket"] == PAYLOADS_BUCKET and field["n"] == NUM_TOKENS
    assert field["ref"]["name"] == "r1/r1:t000000:completed/response_token_ids"
    assert isinstance(decoded, Completed) and unresolved(decoded.response_token_ids) is not None
    assert num_items(decoded.response_token_ids) == NUM_TOKENS
    assert encode(decoded) == data  # passed on unresolved, the reference stays whole
    assert resolved == event
    lean = decode_event_lean(data)
    assert isinstance(lean, Completed) and num_items(lean.response_token_ids) == NUM_TOKENS


async def test_an_offloaded_step_event_leaves_out_its_defaults(settings: Settings) -> None:
    """The offloaded form is the encoder's: a value equal to its default (here computed) is
    left out, and the stored event re-encodes to the same bytes."""
    event = Generated(
        event_id="r2:t000000:0:generated",
        rollout_id="r2",
        traj_id="t000000",
        occurred_at=1.0,
        step=0,
        worker_id="w0",
        output_token_ids=token_ids(NUM_TOKENS),
        output_logprobs=logprobs(NUM_TOKENS),
        queue_s=float("0"),  # equal to the default, not the default object
    )
    async with Bus(settings) as bus:
        await bus.publish(event)
        [data] = await stored(bus, "r2")
    payload = json.loads(data)
    assert "ref" in payload["output_token_ids"] and "queue_s" not in payload
    assert encode(decode_event(data)) == data


async def test_a_changed_or_missing_object_is_refused(settings: Settings) -> None:
    async with Bus(settings) as bus:
        await bus.publish(completed("r2"))
        [data] = await stored(bus, "r2")
        reference = json.loads(data)["response_token_ids"]["ref"]
        name = reference["name"]
        payloads = Objects(bus.js, PAYLOADS_BUCKET)
        await payloads.put(name, b"\0" * reference["size"])
        with pytest.raises(PayloadError, match="SHA-256"):
            await bus.resolve(decode_event(data))
        await payloads.put(name, b"\0" * (reference["size"] + 1))
        with pytest.raises(PayloadError, match="bytes, the event says"):
            await bus.resolve(decode_event(data))
        await payloads.delete(name)
        with pytest.raises(PayloadError, match="missing"):
            await bus.resolve(decode_event(data))


async def test_a_rollouts_payloads_are_deleted_with_it(settings: Settings) -> None:
    async with Bus(settings) as bus:
        await bus.publish_many([completed("r3", "t000000"), completed("r3", "t000001")])
        await bus.publish(completed("r4"))
        assert await bus.delete_payloads("r3") == 2 * 2  # ids and logprobs (the mask then fits)
        assert await bus.delete_payloads("r3") == 0
        [kept] = await stored(bus, "r4")
        assert await bus.resolve(decode_event(kept)) == completed("r4")


async def test_small_events_stay_inline(settings: Settings) -> None:
    small = replace_tokens(completed("r5"), 100)
    async with Bus(settings) as bus:
        await bus.publish(small)
        [data] = await stored(bus, "r5")
    assert b'"ref"' not in data and decode_event(data) == small


def replace_tokens(event: Completed, num_tokens: int) -> Completed:
    return msgspec.structs.replace(
        event,
        response_token_ids=token_ids(num_tokens),
        response_logprobs=logprobs(num_tokens),
        loss_mask=[1] * num_tokens,
    )


def test_the_delete_payloads_command(settings: Settings) -> None:
    """A synchronous test: the command runs its own event loop."""
    from typer.testing import CliRunner

    from heddle.cli import app

    async def publish() -> None:
        async with Bus(settings) as bus:
            await bus.publish(completed("r6"))

    asyncio.run(publish())
    assert settings.nats_url is not None
    root = ["--nats-url", settings.nats_url, "--data-dir", str(settings.data_dir)]
    result = CliRunner(env={"HEDDLE_MAX_EVENT_BYTES": "8192"}).invoke(
        app, [*root, "rollout", "delete-payloads", "r6"]
    )
    assert result.exit_code == 0, result.output
    assert "deleted 2 payload objects of r6" in result.stdout
