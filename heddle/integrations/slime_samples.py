"""slime's ``Sample`` filled from a Heddle trajectory, and put back to its prompt state.

The samples' own class is used (``type(sample).Status``), so slime's ``Sample`` comes back.
docs/integrations.md gives the field contract and its source in slime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from heddle.events import Completed
from heddle.integrations.batch import BatchResult

STATUS_OF_FINISH_REASON: dict[str, str] = {
    "stop": "COMPLETED",
    "environment_done": "COMPLETED",
    "length": "TRUNCATED",
    "max_steps": "TRUNCATED",
    "aborted": "ABORTED",
    "stale": "ABORTED",  # stale on its last attempt (earlier ones run afresh by themselves)
    "tool_error": "FAILED",
    "error": "FAILED",
}
"""slime ``Sample.Status`` member name for each Heddle finish reason."""

UNTRAINED_STATUSES = frozenset({"ABORTED", "FAILED"})
GENERATED_STATUSES = frozenset({"COMPLETED", "TRUNCATED"})
"""A sample slime hands back with one of these keeps its response (slime's partial rollout
puts finished groups back in its buffer): it is not generated again."""


def status_name(sample: Any) -> str:
    status = getattr(sample, "status", None)
    return str(getattr(status, "name", ""))


def is_aborted(group: Sequence[Any]) -> bool:
    return any(status_name(sample) == "ABORTED" for sample in group)


def is_generated(group: Sequence[Any]) -> bool:
    """Whether every sample of ``group`` already holds a finished response."""
    return all(status_name(s) in GENERATED_STATUSES and s.response_length for s in group)


def fill_sample(
    sample: Any, trajectory: Completed, metrics: Mapping[str, float], text: str = ""
) -> Any:
    """``sample`` with the fields of slime's contract set from ``trajectory``; ``text`` is the
    response decoded with the workers' tokenizer (``Sample.response``: slime's reward models
    read it). The reward is Heddle's environment's. A failed or aborted sample keeps its tokens
    with an all-0 loss mask and reward 0.0, and a failed one is ``remove_sample`` (slime's own
    flag for "no part in the loss"); an aborted one never reaches training (``slime_loop``)."""
    status = STATUS_OF_FINISH_REASON.get(trajectory.finish_reason, "FAILED")
    response = list(trajectory.response_token_ids)
    trained = status not in UNTRAINED_STATUSES
    sample.tokens = list(trajectory.prompt_token_ids) + response
    sample.response = text
    sample.response_length = len(response)
    sample.loss_mask = list(trajectory.loss_mask) if trained else [0] * len(response)
    sample.rollout_log_probs = list(trajectory.response_logprobs)
    sample.reward = float(trajectory.reward) if trained else 0.0
    sample.weight_versions = [str(v) for v in trajectory.weight_versions]
    sample.status = type(sample).Status[status]
    if status == "FAILED" and hasattr(sample, "remove_sample"):
        sample.remove_sample = True
    sample.metadata = {
        **(sample.metadata or {}),
        "heddle": {
            "traj_id": trajectory.traj_id,
            "rollout_id": trajectory.rollout_id,
            "group_id": trajectory.group_id,
            "finish_reason": trajectory.finish_reason,
            "reason": trajectory.reason,
            "logprob_mask": list(trajectory.logprob_mask),
            "timings": msgspec.to_builtins(trajectory.timings),
            "prompt_length": len(trajectory.prompt_token_ids),
        },
        "heddle_metrics": dict(metrics),
    }
    return sample


def reset_sample(sample: Any) -> Any:
    """``sample`` as its data source first gave it: the prompt's ids only, no response, status
    ``PENDING``; what a trajectory aborted before its end leaves when its group goes back to
    slime's data source (Heddle runs it again from its prompt)."""
    heddle = (sample.metadata or {}).pop("heddle", None) or {}
    (sample.metadata or {}).pop("heddle_metrics", None)
    prompt_length = int(heddle.get("prompt_length", len(sample.tokens) - sample.response_length))
    sample.tokens = list(sample.tokens[:prompt_length])
    sample.response = ""
    sample.response_length = 0
    sample.loss_mask = None
    sample.rollout_log_probs = None
    sample.reward = None
    sample.weight_versions = []
    sample.status = type(sample).Status.PENDING
    return sample


def fill_groups(groups: Sequence[Sequence[Any]], result: BatchResult) -> list[list[Any]]:
    """Each sample of ``groups`` filled from its trajectory of ``result`` (group ``g``, sample
    ``k`` is trajectory ``g * len(group) + k``); the groups, in order."""
    filled: list[list[Any]] = []
    for g, group in enumerate(groups):
        width, trajectories = len(group), result.trajectories
        filled.append([fill_sample(s, trajectories[g * width + k], result.metrics)
                       for k, s in enumerate(group)])  # fmt: skip
    return filled
