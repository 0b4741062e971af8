"""The GRPO example: group-relative advantages against a brute-force reference, the toy task's
reward, and a short run through a whole Heddle (torch workers) whose steps publish versions the
next rollout runs on, with the staleness bound kept under overlap."""

from __future__ import annotations

import asyncio
import math
import statistics
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from heddle.config import Settings
from heddle.events import Completed
from heddle.examples.grpo import GrpoConfig, run, staleness
from heddle.examples.grpo_train import group_advantages
from heddle.workers.environments import create_environment


def completed(group: str, reward: float, versions: list[int] | None = None) -> Completed:
    return Completed(event_id=f"{group}:{reward}", occurred_at=0.0, traj_id="t", num_steps=1,
                     group_id=group, reward=reward, weight_versions=versions or [0])  # fmt: skip


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from([0.0, 0.5, 1.0])), min_size=1))
def test_advantages_are_normalized_within_each_group(rows: list[tuple[str, float]]) -> None:
    batch = [completed(group, reward) for group, reward in rows]
    advantages = group_advantages(batch)
    for (group, reward), advantage in zip(rows, advantages, strict=True):
        rewards = [r for g, r in rows if g == group]
        mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
        assert math.isclose(advantage, (reward - mean) / (std + 1e-6), abs_tol=1e-9)


def test_the_toy_task_rewards_the_named_class_of_ascii_answers() -> None:
    env = create_environment("token_class")
    assert env.reset({"target": 2}).text == "2"
    assert env.step("b").reward == 1.0  # ord("b") = 98 = 2 mod 4
    env = create_environment("token_class")
    env.reset({"target": 2})
    assert env.step("\ufffd").reward == 0.0  # not ASCII


def test_staleness_counts_versions_behind_the_trainer() -> None:
    assert staleness(completed("g", 1.0, [3]), 4) == 1
    assert staleness(completed("g", 1.0, [2, 3]), 4) == 2
    assert staleness(completed("g", 1.0, [4]), 4) == 0


async def test_a_short_overlapped_run_publishes_versions_within_the_bound(tmp_path: Path) -> None:
    config = GrpoConfig(steps=2, group_size=4, num_workers=1, overlap=True, max_staleness=1)
    reports = await run(config, Settings(data_dir=tmp_path / "data"), tmp_path)
    assert [r.step for r in reports] == [0, 1]
    assert [r.num_trajectories for r in reports] == [16, 16]
    assert all(r.max_staleness_seen <= 1 for r in reports)
    assert reports[1].weight_version == 0  # submitted before the first version was trained
    saved = await asyncio.to_thread(lambda: sorted(p.name for p in tmp_path.glob("v*.pt")))
    assert saved == ["v1.pt", "v2.pt"]
    assert all(0.0 <= r.reward_mean <= 1.0 for r in reports)
