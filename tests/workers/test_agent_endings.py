"""How a trajectory ends, as the trainer sees it: one terminal reason (the last generation's
truncation is the trajectory's), the response cap, chat prompts tokenized on the worker, prompt
ids checked against the vocabulary, logprobs the engine did not return told apart from 0.0."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_agent_memory import FAST, STEPS, Harness, MemoryBus, _command

from heddle.events import (
    Abort,
    ChatMessage,
    Completed,
    Failed,
    Generated,
    GenerationStarted,
)
from heddle.workers.engines.base import GenerationRequest, GenerationResult
from heddle.workers.engines.simulated import SimulatedEngine, SimulatedEngineOptions
from heddle.workers.tokenizers import ByteTokenizer, chat_prompt_ids


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness(MemoryBus())
    yield h
    await h.close()


def last_generated(harness: Harness, traj_id: str) -> Generated:
    return [e for e in harness.bus.events_of(traj_id) if isinstance(e, Generated)][-1]


async def finish(harness: Harness, traj_id: str, steps: list[dict[str, Any]], **kw: Any) -> Any:
    await harness.submit(traj_id, "w0", steps, **kw)
    return await harness.wait_finished(traj_id)


async def test_a_truncated_last_generation_makes_the_trajectory_length(harness: Harness) -> None:
    await harness.add_worker("w0")
    cut = await finish(harness, "t1", [{"output_tokens": 40}], max_new_tokens=20)
    assert isinstance(cut, Completed)
    assert last_generated(harness, "t1").finish_reason == cut.finish_reason == "length"
    whole = await finish(harness, "t2", [{"output_tokens": 40}], max_new_tokens=60)
    assert isinstance(whole, Completed)
    assert last_generated(harness, "t2").finish_reason == whole.finish_reason == "stop"
    assert (whole.group_id, whole.index) == ("g", 0)


async def test_the_response_cap_ends_the_trajectory_with_length(harness: Harness) -> None:
    await harness.add_worker("w0")
    for cap in (30, 50, 60):
        done = await finish(harness, f"t{cap}", STEPS, max_response_tokens=cap)
        assert isinstance(done, Completed) and done.finish_reason == "length"
        assert 0 < len(done.response_token_ids) <= cap
    uncapped = await finish(harness, "t0", STEPS, max_response_tokens=1000)
    assert isinstance(uncapped, Completed) and uncapped.finish_reason == "stop"
    assert len(uncapped.response_token_ids) == 40 + 12 + 25 + 7 + 10


async def test_an_abort_ends_as_aborted_with_group_and_index(harness: Harness) -> None:
    await harness.add_worker("w0", time_scale=20.0)
    await harness.submit("t1", "w0", [{"output_tokens": 50_000}], max_new_tokens=60_000)
    await harness.wait_for(lambda: harness.agents["w0"].table.generating())
    harness.deliver(_command(Abort, "w0", "a1", traj_id="t1", reason="operator"))
    failed = await harness.wait_finished("t1")
    assert isinstance(failed, Failed) and failed.finish_reason == "aborted"
    assert (failed.group_id, failed.index) == ("g", 0)


async def test_chat_messages_are_tokenized_by_the_worker(harness: Harness) -> None:
    await harness.add_worker("w0")
    messages = [
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="user", content="hi"),
    ]
    done = await finish(harness, "t1", [{"output_tokens": 5}], messages=messages)
    expected = chat_prompt_ids(ByteTokenizer(), messages)
    assert expected[-len("<|assistant|>\n") :] == list(b"<|assistant|>\n")
    started = [e for e in harness.bus.events_of("t1") if isinstance(e, GenerationStarted)]
    assert started[0].input_token_ids == expected
    assert isinstance(done, Completed) and done.prompt_token_ids == expected


async def test_prompt_ids_outside_the_vocabulary_fail_with_the_reason(harness: Harness) -> None:
    await harness.add_worker("w0")
    failed = await finish(harness, "t1", [{"output_tokens": 5}], prompt_token_ids=[1, 2, 99999])
    assert isinstance(failed, Failed) and failed.finish_reason == "error"
    assert "prompt_token_ids[2] = 99999" in failed.reason and "[0, 259)" in failed.reason


class NoLogprobsEngine(SimulatedEngine):
    async def generate(self, request: GenerationRequest) -> GenerationResult:
        return dataclasses.replace(await super().generate(request), output_logprobs=[])


async def test_the_logprob_mask_tells_missing_logprobs_from_tool_tokens(harness: Harness) -> None:
    await harness.add_worker("w0")
    done = await finish(harness, "t1", STEPS)
    assert isinstance(done, Completed) and done.logprob_mask == done.loss_mask
    await harness.add_worker("w1", NoLogprobsEngine(SimulatedEngineOptions(time_scale=FAST)))
    await harness.submit("t2", "w1", STEPS)
    bare = await harness.wait_finished("t2")
    assert isinstance(bare, Completed) and sum(bare.loss_mask) == 75
    assert bare.logprob_mask == [0] * len(bare.response_token_ids)
