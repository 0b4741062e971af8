"""A slime user's functions, named by dotted path in slime's flags the way slime's own examples
are (``--dynamic-sampling-filter-path``, ``--rollout-sample-hook-path``, ``--custom-rm-path``
with ``--group-rm``, ``--rollout-sample-filter-path``, ``--rollout-all-samples-process-path``).
Each records its calls in ``CALLS`` for the test to read."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

CALLS: dict[str, list[Any]] = defaultdict(list)


@dataclass
class DynamicFilterOutput:
    """The fields of slime's ``slime.rollout.filter_hub.base_types.DynamicFilterOutput``."""

    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


def keep_nonzero_std(args: Any, samples: list[Any], **kwargs: Any) -> DynamicFilterOutput:
    """DAPO's filter (slime's ``check_reward_nonzero_std``): drop a group whose rewards tie."""
    rewards = [float(sample.reward) for sample in samples]
    keep = statistics.pstdev(rewards) > 1e-6
    CALLS["filter"].append(samples[0].metadata["heddle_task"]["id"])
    return DynamicFilterOutput(keep=keep, reason=None if keep else f"zero_std_{rewards[0]:.1f}")


async def tag_sample(args: Any, sample: Any, *, rollout_id: int | None = None) -> Any:
    """A sample hook (async, declares ``rollout_id`` only): marks the sample."""
    sample.metadata["hooked_in_rollout"] = rollout_id
    CALLS["hook"].append(sample.index)
    return sample


async def group_reward(args: Any, samples: list[Any]) -> list[float]:
    """A group reward model (``--group-rm``): alternately 0 and 1 within the group, or all 0
    for a task whose id starts with ``tie`` (the filter then drops its group)."""
    CALLS["rm"].append(len(samples))
    if samples[0].metadata["heddle_task"]["id"].startswith("tie"):
        return [0.0] * len(samples)
    return [float(k % 2) for k in range(len(samples))]


def remove_truncated(args: Any, data: list[list[Any]]) -> None:
    for group in data:
        for sample in group:
            sample.remove_sample = sample.status.name == "TRUNCATED"
    CALLS["sample_filter"].append(len(data))


def count_all(args: Any, all_groups: list[list[Any]], data_source: Any) -> None:
    CALLS["all_samples"].append(len(all_groups))
