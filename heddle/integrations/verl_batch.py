"""A verl batch in, a verl batch out: the Heddle request of a ``DataProto`` of prompts, and the
``DataProto`` of the trajectories that came back, shaped exactly as verl 0.9.1's agent loop
shapes its own (``AgentLoopWorker._agent_loop_postprocess`` and ``_postprocess``).

Output per row (``P`` = ``rollout.prompt_length``, ``R`` = ``rollout.response_length``):
``prompts`` (P, left-padded, left-truncated when longer, as verl does), ``responses`` (R,
right-padded), ``response_mask`` (Heddle's loss mask: 1 for model tokens, 0 for tool tokens and
padding; all 0 for a failed or aborted trajectory), ``input_ids`` / ``attention_mask`` /
``position_ids`` (P + R), ``rollout_log_probs`` (0.0 on padding and tool tokens),
``heddle_logprob_mask`` (1 where the engine returned a logprob), ``rm_scores`` (the
environment's reward at the last response token, 0.0 for a failure). ``non_tensor_batch``:
``__num_turns__`` (prompt + generations + tool observations), ``multi_modal_inputs`` ({}),
verl's default extra fields (None), ``heddle_traj_id``, ``heddle_group_id``,
``heddle_finish_reason`` and ``heddle_reason``, plus the input's non-tensor fields when verl's
reward workers are not streaming (as verl does). Responses longer than R cannot come back: the
rollout is submitted with ``max_response_tokens`` = R (a longer one would still be cut at R).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from heddle.events import Completed
from heddle.integrations import verl_compat
from heddle.integrations.batch import BatchRequest
from heddle.rollout.submission import TaskOptions

UNTRAINED_REASONS = frozenset({"aborted", "tool_error", "error"})
VERL_EXTRA_FIELDS = (
    "turn_scores",
    "tool_rewards",
    "min_global_steps",
    "max_global_steps",
    "extras",
)


def group_size_of(non_tensor: Mapping[str, Any], num_rows: int) -> int:
    """Rows per prompt: verl repeats each prompt ``rollout.n`` times, interleaved, with one
    ``uid`` per prompt; 1 when there is no ``uid`` or the runs are uneven."""
    uids = non_tensor.get("uid")
    if uids is None or num_rows == 0:
        return 1
    size = 1
    while size < num_rows and uids[size] == uids[0]:
        size += 1
    runs_even = num_rows % size == 0 and all(
        len(set(uids[start : start + size])) == 1 for start in range(0, num_rows, size)
    )
    return size if runs_even else 1


def messages_of(raw_prompt: Any) -> list[dict[str, str]]:
    """verl's ``raw_prompt`` (a chat) as Heddle's ``{"role", "content"}`` messages."""
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in list(raw_prompt)]


def task_of(extra_info: Any, reward_model: Any, messages: list[dict[str, str]]) -> Any:
    """A row's environment task: ``extra_info.heddle_task``, else ``{"question": <last user
    message>, "answer": reward_model.ground_truth}``."""
    extra_row = dict(extra_info) if extra_info is not None else {}
    if "heddle_task" in extra_row:
        return dict(extra_row["heddle_task"])
    answer = reward_model.get("ground_truth", "") if reward_model is not None else ""
    users = [m["content"] for m in messages if m["role"] == "user"]
    return {"question": users[-1] if users else "", "answer": answer}


def _column(non_tensor: Mapping[str, Any], key: str, row: int) -> Any:
    column = non_tensor.get(key)
    return None if column is None else column[row]


def request_of(prompts: Any, rollout: Any, heddle: Mapping[str, Any]) -> BatchRequest:
    """The Heddle batch of verl's ``prompts`` (``DataProto``, rows repeated per sample):
    one task per ``uid`` group, its chat from ``raw_prompt``, its task from
    ``extra_info.heddle_task`` or ``{"question": last user message, "answer":
    reward_model.ground_truth}``; caps from ``rollout`` (verl's rollout config)."""
    non_tensor = prompts.non_tensor_batch
    num_rows = len(prompts)
    size = group_size_of(non_tensor, num_rows)
    firsts = range(0, num_rows, size)
    raw = non_tensor.get("raw_prompt")
    chats = [messages_of(raw[row]) for row in firsts] if raw is not None else None
    tasks = [
        task_of(_column(non_tensor, "extra_info", row), _column(non_tensor, "reward_model", row),
                chats[i] if chats else [])
        for i, row in enumerate(firsts)
    ]  # fmt: skip
    validate = bool(prompts.meta_info.get("validate", False))
    temperature = rollout.val_kwargs.temperature if validate else rollout.temperature
    response_length = int(rollout.response_length)
    options = TaskOptions(
        group_size=size,
        max_steps=int(heddle.get("max_steps", 16)),
        max_new_tokens=int(heddle.get("max_new_tokens", response_length)),
        max_total_tokens=int(rollout.prompt_length) + response_length,
        max_response_tokens=response_length,
        temperature=float(temperature),
        seed=int(heddle.get("seed", 0)),
    )
    return BatchRequest(
        tasks=tasks,
        environment=str(heddle.get("environment", "math")),
        task_options=options,
        messages=chats,
        policy=str(heddle.get("policy", "heddle")),
        tokenizer=str(heddle.get("tokenizer", "byte")),
        labels={"trainer": "verl", "global_steps": str(prompts.meta_info.get("global_steps", -1))},
    )


def _fill(trajectories: Sequence[Completed], prompt_length: int, response_length: int,
          pad_token_id: int) -> dict[str, np.ndarray]:  # fmt: skip
    n, p, r = len(trajectories), prompt_length, response_length
    arrays: dict[str, np.ndarray] = {
        "prompts": np.full((n, p), pad_token_id, np.int64),
        "prompt_attention": np.zeros((n, p), np.int64),
        "responses": np.full((n, r), pad_token_id, np.int64),
        "response_attention": np.zeros((n, r), np.int64),
        "loss_mask": np.zeros((n, r), np.int64),
        "logprobs": np.zeros((n, r), np.float32),
        "logprob_mask": np.zeros((n, r), np.int64),
        "scores": np.zeros(n, np.float32),
    }
    for i, t in enumerate(trajectories):
        prompt = t.prompt_token_ids[-p:] if p else []
        arrays["prompts"][i, p - len(prompt) :] = prompt
        arrays["prompt_attention"][i, p - len(prompt) :] = 1
        length = min(len(t.response_token_ids), r)
        arrays["responses"][i, :length] = t.response_token_ids[:length]
        arrays["response_attention"][i, :length] = 1
        arrays["loss_mask"][i, :length] = t.loss_mask[:length]
        arrays["logprobs"][i, :length] = t.response_logprobs[:length]
        if t.logprob_mask:
            arrays["logprob_mask"][i, :length] = t.logprob_mask[:length]
        arrays["scores"][i] = 0.0 if t.finish_reason in UNTRAINED_REASONS else t.reward
    return arrays


def to_data_proto(
    trajectories: Sequence[Completed],
    rollout: Any,
    *,
    pad_token_id: int = 0,
    input_non_tensor: Mapping[str, Any] | None = None,
    metrics: Mapping[str, float] | None = None,
) -> Any:
    """The ``DataProto`` verl's trainer expects of ``trajectories`` (one per row, in row
    order; the module docstring lists the fields)."""
    a = _fill(trajectories, int(rollout.prompt_length), int(rollout.response_length), pad_token_id)
    loss_mask = torch.from_numpy(a["loss_mask"])
    response_attention = torch.from_numpy(a["response_attention"])
    failed = np.array([t.finish_reason in UNTRAINED_REASONS for t in trajectories], dtype=bool)
    response_mask = loss_mask * response_attention
    response_mask[torch.from_numpy(failed)] = 0
    attention = torch.cat([torch.from_numpy(a["prompt_attention"]), response_attention], dim=1)
    lengths = response_attention.sum(dim=1)
    rm_scores = torch.zeros(response_mask.shape, dtype=torch.float32)
    last = (lengths - 1).clamp(min=0)
    rm_scores[torch.arange(len(trajectories)), last] = torch.from_numpy(a["scores"])
    tensors = {
        "prompts": torch.from_numpy(a["prompts"]),
        "responses": torch.from_numpy(a["responses"]),
        "response_mask": response_mask,
        "input_ids": torch.cat(
            [torch.from_numpy(a["prompts"]), torch.from_numpy(a["responses"])], 1
        ),
        "attention_mask": attention,
        "position_ids": verl_compat.position_ids(attention),
        "rollout_log_probs": torch.from_numpy(a["logprobs"]),
        "heddle_logprob_mask": torch.from_numpy(a["logprob_mask"]),
        "rm_scores": rm_scores,
    }
    batch = verl_compat.tensor_dict()(tensors, batch_size=len(trajectories))
    non_tensor = _non_tensor(trajectories, a["loss_mask"], a["response_attention"])
    non_tensor.update(input_non_tensor or {})
    meta_info = {"timing": dict(metrics or {}), "reward_extra_keys": []}
    return verl_compat.data_proto()(batch=batch, non_tensor_batch=non_tensor, meta_info=meta_info)


def _non_tensor(
    trajectories: Sequence[Completed], loss_mask: np.ndarray, attention: np.ndarray
) -> dict[str, np.ndarray]:
    n = len(trajectories)
    tool_spans = ((loss_mask[:, :-1] == 1) & (loss_mask[:, 1:] == 0) & (attention[:, 1:] == 1)).sum(
        1
    )
    steps = np.array([t.num_steps for t in trajectories], dtype=np.int32)
    non_tensor: dict[str, np.ndarray] = {
        "__num_turns__": (1 + steps + tool_spans).astype(np.int32),
        "multi_modal_inputs": _objects([{} for _ in range(n)]),
        "heddle_traj_id": _objects([t.traj_id for t in trajectories]),
        "heddle_group_id": _objects([t.group_id for t in trajectories]),
        "heddle_finish_reason": _objects([t.finish_reason for t in trajectories]),
        "heddle_reason": _objects([t.reason for t in trajectories]),
    }
    for key in VERL_EXTRA_FIELDS:
        non_tensor[key] = _objects([None] * n)
    return non_tensor


def _objects(values: list[Any]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array
