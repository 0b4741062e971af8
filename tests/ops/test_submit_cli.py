"""docs/trainer.md's submission with the real NATS CLI, as a trainer in another language would
run it: a request to ``heddle.ops.submit.<trainer>``, and a large one uploaded first with
``nats object put`` to the trainer's bucket and named by the request; a refused one shows its
reason in the service's error headers."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from heddle.bus import Bus
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, ControlPlaneService
from heddle.workers.environments import validate_task

from .natscli import NatsCli, nats_binary

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def served(nats_url: str, tmp_path: Path) -> AsyncIterator[tuple[NatsCli, Bus]]:
    settings = Settings(nats_url=nats_url, data_dir=tmp_path / "data")
    config = ControlPlaneConfig(project_ledger=False, learn_from_ledger=False)
    service = ControlPlaneService(settings, config, check_task=validate_task)
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    try:
        await asyncio.wait_for(service.ready.wait(), timeout=60)
        async with Bus(settings) as bus:
            yield NatsCli(nats_binary(), tmp_path / "home"), bus
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=30)


def spec(index: int, prompt: list[int]) -> dict[str, object]:
    return {"group_id": f"g{index}", "index": index, "environment": "math",
            "task": {"question": "1+1?", "answer": 2}, "prompt_token_ids": prompt}  # fmt: skip


async def test_a_trainer_submits_with_the_nats_cli(
    served: tuple[NatsCli, Bus], tmp_path: Path
) -> None:
    cli, bus = served
    server = ["nats", "--server", bus.url]
    small = json.dumps({"rollout_id": "r-cli", "trajectories": [spec(0, [1, 2, 3])]})
    reply = await cli.run([*server, "req", "heddle.ops.submit.grpo", small])
    assert reply.returncode == 0 and '"trainer":"grpo"' in reply.text, reply.text

    rng = random.Random(1)  # 4 x 40,000 random ids: about 850 KB of JSON, over a request's size
    prompts = [[rng.randrange(100_000) for _ in range(40_000)] for _ in range(4)]
    large = json.dumps({"rollout_id": "r-upload", "trajectories": [
        spec(i, p) for i, p in enumerate(prompts)]}).encode()  # fmt: skip
    path = tmp_path / "submission.json"
    path.write_bytes(large)
    for argv in (
        [*server, "object", "add", "heddle-submit-grpo"],
        [*server, "object", "put", "heddle-submit-grpo", str(path), "--name", "r-upload"],
    ):
        done = await cli.run(argv)
        assert done.returncode == 0, done.text
    ref = {"name": "r-upload", "size": len(large), "sha256": hashlib.sha256(large).hexdigest()}
    uploaded = await cli.run(
        [*server, "req", "heddle.ops.submit.grpo", json.dumps({"upload": ref})]
    )
    assert uploaded.returncode == 0 and '"num_trajectories":4' in uploaded.text, uploaded.text
    found = await bus.last_subject_message("HEDDLE_EVENTS", "heddle.evt.rollout.r-upload.submitted")
    assert found is not None

    typo = json.dumps({"rollout_id": "r-typo", "trajectories": [{**spec(0, [1]), "max_stepz": 1}]})
    refused = await cli.run([*server, "req", "heddle.ops.submit.grpo", typo])
    assert "400" in refused.text and "max_stepz" in refused.text, refused.text
