"""The trainer client against a whole Heddle in one process: every completed trajectory comes
exactly once with its tokens, logprobs and loss mask; a trainer that stops midway resumes on its
durable consumer; ``wait`` returns the summary; bad submissions say what is wrong."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator

import pytest

from heddle.bus import ReplayQuery
from heddle.client import HeddleClient
from heddle.completions import ACK_WAIT_S
from heddle.config import Settings, child_variables
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import Completed
from heddle.events.subjects import delivery_stream, trajectory_subjects
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.rollout.submission import TaskOptions
from heddle.traces import TraceStep, TraceTrajectory, write_trace

TIME_SCALE = 400.0


def small_trace(num: int) -> list[TraceTrajectory]:
    return [
        TraceTrajectory(
            id=f"x{index}",
            group=f"p{index // 2}",
            prompt_tokens=20 + index,
            steps=[
                TraceStep(output_tokens=30 + 5 * index, tool_s=2.0, tool_output_tokens=7),
                TraceStep(output_tokens=12, tool_s=0.0, tool_output_tokens=0),
            ],
        )
        for index in range(num)
    ]


def deployment(settings: Settings) -> InProcessDeployment:
    control = ControlPlaneConfig(
        cost_model="qwen3-8b", predictor=PredictorConfig("oracle"), worker_timeout_s=5.0
    )
    options = InProcessOptions(
        num_workers=2,
        engine_options={"time_scale": str(TIME_SCALE), "model": "qwen3-8b"},
        control_plane=control,
    )
    return InProcessDeployment(settings, options)


async def wait_for_all(
    completions: AsyncIterator[Completed], timeout_s: float
) -> AsyncIterator[Completed]:
    """``completions``, failing after ``timeout_s`` instead of hanging."""
    async with asyncio.timeout(timeout_s):
        async for completed in completions:
            yield completed


def check_shape(trajectory: Completed) -> None:
    response = trajectory.response_token_ids
    mask = trajectory.loss_mask
    assert len(mask) == len(response) == len(trajectory.response_logprobs)
    assert sum(mask) == trajectory.num_output_tokens
    assert len(response) - sum(mask) == 7  # one observation of 7 tool tokens
    tool_logprobs = [lp for lp, m in zip(trajectory.response_logprobs, mask, strict=True) if not m]
    assert tool_logprobs == [0.0] * 7


async def test_completions_come_once_each_and_a_restarted_trainer_resumes(
    settings: Settings,
) -> None:
    trace = small_trace(6)
    path = settings.data_dir / "trace.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_trace(path, trace)
    async with deployment(settings):
        async with HeddleClient(settings, trainer="grpo") as client:
            # a path as text, as a script gets it (it raised AttributeError: only a Path worked)
            rollout_id = await client.submit(trace=str(path), time_scale=TIME_SCALE)
            first: list[str] = []
            async for trajectory in client.completions(rollout_id):
                check_shape(trajectory)
                first.append(trajectory.traj_id)
                if len(first) == 2:
                    break  # the trainer stops with the second one in hand
        async with HeddleClient(settings, trainer="grpo") as client:
            rest = [t.traj_id async for t in client.completions(rollout_id)]
            summary = await client.wait(rollout_id, timeout_s=60)
            durable = client.consumer_name(rollout_id)
            info = await client.bus.js.consumer_info(delivery_stream("grpo"), durable)
            assert info.config.ack_wait == ACK_WAIT_S == 30.0
        async with HeddleClient(settings, trainer="grpo") as client:
            # A trainer restarted after it took the whole rollout, its end included (the chaos
            # bench's killed trainer starts again with its first rollout): nothing comes again,
            # and the iteration ends (it waited for an end that its consumer had taken).
            again = client.completions(rollout_id)
            assert [t.traj_id async for t in wait_for_all(again, timeout_s=60)] == []
        async with HeddleClient(settings, trainer="other") as client:
            with pytest.raises(ValueError, match=r"403.*another trainer than 'other'"):
                [t async for t in client.completions(rollout_id)]
    assert rest[0] == first[1]  # the one in hand comes again, then the others
    assert sorted(first[:1] + rest) == [f"t{i:06d}" for i in range(6)]
    assert summary.num_completed == 6 and summary.is_finished
    assert summary.makespan_s > 0
    assert summary.output_tokens == sum(t.num_output_tokens for t in trace)


TAKE_ONE_AND_DIE = """
import asyncio, os, sys
from heddle.client import HeddleClient
from heddle.config import load_settings

async def main():
    async with HeddleClient(load_settings(), trainer="grpo") as client:
        async for trajectory in client.completions(sys.argv[1], ack_wait_s=2.0):
            print(trajectory.traj_id, flush=True)
            os._exit(0)  # killed with it in hand: neither acked nor nak'ed

asyncio.run(main())
"""


async def test_a_trainer_killed_with_a_trajectory_in_hand_gets_it_again_after_the_ack_wait(
    settings: Settings,
) -> None:
    """The server hands the killed trainer's trajectory again once the ack wait ran out (it
    was 300 s and could not be set: a restarted trainer waited five minutes for it)."""
    async with deployment(settings):
        async with HeddleClient(settings, trainer="grpo") as client:
            rollout_id = await client.submit(trace=small_trace(3), time_scale=TIME_SCALE)
            await client.wait(rollout_id, timeout_s=60)
        variables = {name: value for name, value in child_variables(settings).items() if value}
        killed = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            TAKE_ONE_AND_DIE,
            rollout_id,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, **variables},
        )
        out, _ = await asyncio.wait_for(killed.communicate(), 120)
        assert killed.returncode == 0
        async with HeddleClient(settings, trainer="grpo") as client:
            completions = client.completions(rollout_id, ack_wait_s=2.0)
            again = [t.traj_id async for t in wait_for_all(completions, timeout_s=60)]
    held = out.decode().split()
    assert len(held) == 1 and again[:1] == held
    assert sorted(again) == [f"t{i:06d}" for i in range(3)]


async def test_bad_submissions_say_what_is_wrong(settings: Settings) -> None:
    async with HeddleClient(settings) as client:
        with pytest.raises(ValueError, match="not both"):
            await client.submit()
        with pytest.raises(ValueError, match="environment"):
            await client.submit([{"question": "1+1?", "answer": "2"}])
        with pytest.raises(ValueError, match="task 1"):
            await client.submit([{"nothing": 1}], environment="math")
        with pytest.raises(ValueError, match="unknown policy"):
            await client.submit(trace=small_trace(1), policy="nope")
        with pytest.raises(Exception, match="heddle up"):
            await client.submit(trace=small_trace(1))  # no control plane ever ran here


async def test_submit_takes_prompt_ids_and_messages_and_the_deployment_time_scale(
    settings: Settings,
) -> None:
    tasks = [{"question": "1+1?", "answer": 2}, {"question": "2+2?", "answer": 4}]
    options = TaskOptions(group_size=2, max_steps=2, max_new_tokens=16, max_response_tokens=40)
    async with deployment(settings), HeddleClient(settings, trainer="grpo") as client:
        with pytest.raises(ValueError, match="differs from the deployment's 400"):
            await client.submit(tasks, environment="math", time_scale=1.0)
        with pytest.raises(ValueError, match="outside"):
            await client.submit(tasks, environment="math", prompt_token_ids=[[1], [300]])
        ids = await client.submit(
            tasks, environment="math", task_options=options, prompt_token_ids=[[65], [66, 67]]
        )
        chats = [[{"role": "user", "content": t["question"]}] for t in tasks]
        chat = await client.submit(tasks, environment="math", task_options=options, messages=chats)
        by_ids = [t async for t in client.completions(ids)]
        by_chat = [t async for t in client.completions(chat)]
        summary = await client.summary(ids)
    assert summary.time_scale == TIME_SCALE
    assert sorted((t.group_id, t.index) for t in by_ids) == [
        ("g00000", 0), ("g00000", 1), ("g00001", 2), ("g00001", 3)
    ]  # fmt: skip
    assert {tuple(t.prompt_token_ids) for t in by_ids} == {(65,), (66, 67)}
    assert {bytes(t.prompt_token_ids) for t in by_chat} == {
        f"<|user|>\n{t['question']}\n<|assistant|>\n".encode() for t in tasks
    }
    for trajectory in by_ids + by_chat:
        assert len(trajectory.response_token_ids) <= 40
        assert trajectory.finish_reason in {"stop", "length", "max_steps"}


async def test_aborted_trajectories_arrive_as_completions_with_their_reason(
    settings: Settings,
) -> None:
    trace = [
        TraceTrajectory(id=f"x{i}", prompt_tokens=10, steps=[TraceStep(output_tokens=200_000)])
        for i in range(3)
    ]
    async with deployment(settings), HeddleClient(settings, trainer="grpo") as client:
        rollout_id = await client.submit(trace=trace)
        started = ReplayQuery(
            filter_subjects=trajectory_subjects(rollout_id, "*", "generation_started"),
            start_sequence=1,
        )
        for _ in range(1200):  # the first generation is under way
            if [r async for r in client.bus.replay_events(started)]:
                break
            await asyncio.sleep(0.05)
        await client.cancel(rollout_id)
        ended = [t async for t in client.completions(rollout_id)]
        await client.cancel(rollout_id)  # already over: nothing more is published
        rollout_events = ReplayQuery(
            filter_subjects=(f"heddle.evt.rollout.{rollout_id}.*",), start_sequence=1
        )
        kinds = [type(r.message).__name__ async for r in client.bus.replay_events(rollout_events)]
    assert sorted(t.index for t in ended) == [0, 1, 2]
    assert {t.finish_reason for t in ended} == {"aborted"}
    assert all(t.reason.startswith("aborted") and t.reward == 0.0 for t in ended)
    assert all(len(t.prompt_token_ids) == 10 for t in ended)
    # through the operations service: the trainer's request, then the cancellation
    assert kinds == ["RolloutSubmitted", "RolloutCancelRequested", "RolloutCancelled"]
