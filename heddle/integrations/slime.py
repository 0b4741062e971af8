"""slime's rollout function on Heddle: ``--rollout-function-path
heddle.integrations.slime.generate_rollout``.

``generate_rollout(args, rollout_id, data_buffer, evaluation=False)`` takes
``args.rollout_batch_size`` groups from ``data_buffer.get_samples`` (slime's data source: each
group holds ``args.n_samples_per_prompt`` copies of one prompt's ``Sample``), runs them as one
Heddle rollout (group size = the group's length) and returns the same groups, each sample filled
as slime's ``Sample`` contract asks (docs/integrations.md, with its source):

- ``tokens`` = prompt ids + response ids, ``response_length`` = len(response ids),
  ``loss_mask`` and ``rollout_log_probs`` over the response (Heddle's loss mask: 1 for model
  tokens, 0 for tool observations), ``reward``, ``weight_versions`` (as strings);
- ``status`` from Heddle's finish reason: ``stop`` / ``environment_done`` -> COMPLETED,
  ``length`` / ``max_steps`` -> TRUNCATED, ``aborted`` -> ABORTED, ``tool_error`` / ``error``
  -> FAILED. An aborted or failed sample keeps its tokens but its loss mask is all 0 (nothing of
  it is trained on) and its reward is 0.0;
- ``metadata["heddle"]``: traj_id, rollout_id, group_id, finish_reason, reason, logprob_mask,
  timings.

The samples' own class is used (``type(sample).Status``), so slime's ``Sample`` comes back.
Prompts: the samples' ``tokens`` when every group has them (the trainer's ids), else their
``prompt`` when every one is a chat (``[{"role", "content"}]``), else the environment builds the
prompt from the task. The task is ``metadata["heddle_task"]`` when given, else
``{"question": <prompt text>, "answer": label}``. Options come from ``args`` (slime's flags and
``heddle_*`` keys of a ``--custom-config-path`` file; ``rollout_options``). ``evaluation=True``
raises ``ValueError``: slime's ``--eval-function-path`` keeps its own evaluation rollout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from heddle.client import HeddleClient
from heddle.config import load_settings
from heddle.events import Completed
from heddle.integrations.batch import BatchRequest, BatchResult, run_batch, run_sync
from heddle.rollout.submission import TaskOptions

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


def generate_rollout(
    args: Any, rollout_id: int, data_buffer: Any, evaluation: bool = False
) -> list[list[Any]]:
    """slime's rollout function (module docstring): groups of filled samples, one per group
    taken from ``data_buffer``; slime's ``call_rollout_fn`` accepts this list as the train
    output. The last batch's metrics are in each sample's ``metadata["heddle_metrics"]``."""
    if evaluation:
        raise ValueError(
            "heddle.integrations.slime runs training rollouts; keep slime's evaluation with "
            "--eval-function-path slime.rollout.sglang_rollout.generate_rollout"
        )
    groups: list[list[Any]] = data_buffer.get_samples(int(args.rollout_batch_size))
    if not groups:
        return []
    request = batch_request(args, groups, rollout_id)
    result = run_sync(_run(args, request))
    return fill_groups(groups, result)


async def _run(args: Any, request: BatchRequest) -> BatchResult:
    settings = load_settings(nats_url=getattr(args, "heddle_nats_url", None))
    trainer = str(getattr(args, "heddle_trainer", "slime"))
    async with HeddleClient(settings, trainer=trainer) as client:
        return await run_batch(client, request)


def rollout_options(args: Any, group_size: int) -> TaskOptions:
    """Heddle's task options from slime's flags: ``rollout_max_response_len`` caps each
    response (and each generation), ``rollout_temperature``, ``rollout_seed``; ``heddle_max_steps``,
    ``heddle_max_total_tokens`` where given (else 32768, or twice the response cap when that
    is more)."""
    max_response = getattr(args, "rollout_max_response_len", None) or 1024
    return TaskOptions(
        group_size=group_size,
        max_steps=int(getattr(args, "heddle_max_steps", 16)),
        max_new_tokens=int(max_response),
        max_total_tokens=int(
            getattr(args, "heddle_max_total_tokens", None) or max(32768, 2 * int(max_response))
        ),
        max_response_tokens=int(max_response),
        temperature=float(getattr(args, "rollout_temperature", 1.0)),
        seed=int(getattr(args, "rollout_seed", 0) or 0),
    )


def batch_request(args: Any, groups: Sequence[Sequence[Any]], rollout_id: int) -> BatchRequest:
    """The Heddle batch of slime's groups (module docstring: tasks and prompts)."""
    sizes = {len(group) for group in groups}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"every group needs the same number of samples (>= 1), got {sizes}")
    firsts = [group[0] for group in groups]
    prompt_ids = [list(s.tokens) for s in firsts] if all(s.tokens for s in firsts) else None
    chats = [s.prompt for s in firsts] if all(isinstance(s.prompt, list) for s in firsts) else None
    return BatchRequest(
        tasks=[_task(sample) for sample in firsts],
        environment=str(getattr(args, "heddle_environment", "math")),
        task_options=rollout_options(args, sizes.pop()),
        prompt_token_ids=prompt_ids,
        messages=None if prompt_ids is not None else chats,
        policy=str(getattr(args, "heddle_policy", "heddle")),
        tokenizer=str(getattr(args, "heddle_tokenizer", "byte")),
        labels={"trainer": "slime", "slime_rollout_id": str(rollout_id)},
    )


def _task(sample: Any) -> Mapping[str, Any]:
    metadata = sample.metadata or {}
    if "heddle_task" in metadata:
        return dict(metadata["heddle_task"])
    prompt = sample.prompt
    if isinstance(prompt, list):
        users = [m["content"] for m in prompt if m.get("role") == "user"]
        prompt = users[-1] if users else ""
    return {"question": str(prompt), "answer": "" if sample.label is None else sample.label}


def fill_groups(groups: Sequence[Sequence[Any]], result: BatchResult) -> list[list[Any]]:
    """Each sample of ``groups`` filled from its trajectory (group ``g``, sample ``k`` is
    trajectory ``g * len(group) + k``); the groups, in order."""
    filled: list[list[Any]] = []
    for g, group in enumerate(groups):
        row = []
        for k, sample in enumerate(group):
            trajectory = result.trajectories[g * len(group) + k]
            row.append(fill_sample(sample, trajectory, result.metrics))
        filled.append(row)
    return filled


def fill_sample(sample: Any, trajectory: Completed, metrics: Mapping[str, float]) -> Any:
    """``sample`` with the fields of slime's contract set from ``trajectory``."""
    status_name = STATUS_OF_FINISH_REASON.get(trajectory.finish_reason, "FAILED")
    response = list(trajectory.response_token_ids)
    sample.tokens = list(trajectory.prompt_token_ids) + response
    sample.response_length = len(response)
    trained = status_name not in UNTRAINED_STATUSES
    sample.loss_mask = list(trajectory.loss_mask) if trained else [0] * len(response)
    sample.rollout_log_probs = list(trajectory.response_logprobs)
    sample.reward = float(trajectory.reward) if trained else 0.0
    sample.weight_versions = [str(v) for v in trajectory.weight_versions]
    sample.status = type(sample).Status[status_name]
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
        },
        "heddle_metrics": metrics,
    }
    return sample
