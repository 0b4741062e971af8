"""Submissions: trace trajectories replay their trace line with the prompt the environment makes
(shared by a group), tasks are sampled group-size times with tokenized prompts, ids are derived,
and bad input says what is wrong."""

from __future__ import annotations

import pytest

from heddle.rollout.submission import (
    RolloutPlan,
    TaskOptions,
    new_rollout_id,
    task_specs,
    trace_specs,
)
from heddle.traces import TraceStep, TraceTrajectory
from heddle.workers.environments import create_environment
from heddle.workers.environments.base import TaskError
from heddle.workers.tokenizers import load_tokenizer


def trace(traj_id: str, group: str, prompt: int, outputs: list[int]) -> TraceTrajectory:
    steps = [TraceStep(output_tokens=n, tool_s=1.0, tool_output_tokens=3) for n in outputs]
    return TraceTrajectory(id=traj_id, group=group, prompt_tokens=prompt, steps=steps)


def test_trace_specs_fit_their_trace() -> None:
    lines = [trace("a", "g1", 50, [10, 9000]), trace("b", "g1", 50, [5]), trace("c", "", 7, [1])]
    specs = trace_specs(lines)
    assert [s.index for s in specs] == [0, 1, 2]
    assert [s.group_id for s in specs] == ["g1", "g1", "c"]
    assert specs[0].prompt_token_ids == specs[1].prompt_token_ids  # one prompt per group
    assert len(specs[0].prompt_token_ids) == 50 and len(specs[2].prompt_token_ids) == 7
    assert specs[0].max_new_tokens == 9000 and specs[0].max_steps == 2
    expected = create_environment("trace").reset(dict(specs[0].task)).token_ids
    assert tuple(specs[0].prompt_token_ids) == expected


def test_task_specs_sample_each_task_and_tokenize_its_prompt() -> None:
    tasks: list[dict[str, object]] = [
        {"question": "What is 2+2?", "answer": "4"},
        {"question": "3*3?", "answer": 9},
    ]
    tokenizer = load_tokenizer("byte")
    specs = task_specs(tasks, "math", tokenizer, TaskOptions(group_size=3, seed=10))
    assert len(specs) == 6
    assert [s.group_id for s in specs] == ["g00000"] * 3 + ["g00001"] * 3
    assert [s.sampling.seed for s in specs] == [10, 11, 12, 13, 14, 15]
    prompt = create_environment("math").reset(tasks[0]).tokens(tokenizer)
    assert specs[0].prompt_token_ids == prompt


def test_a_bad_task_names_itself() -> None:
    with pytest.raises(TaskError, match="task 2"):
        task_specs([{"question": "?", "answer": 1}, {"nope": 1}], "math", load_tokenizer("byte"))


def test_plans_refuse_what_cannot_run() -> None:
    specs = trace_specs([trace("a", "g", 5, [1])])
    with pytest.raises(ValueError, match="unknown policy"):
        RolloutPlan("nope", specs)
    with pytest.raises(ValueError, match="at least one"):
        RolloutPlan("heddle", [])
    with pytest.raises(ValueError, match="time_scale"):
        RolloutPlan("heddle", specs, time_scale=0)
    assert new_rollout_id() != new_rollout_id()
