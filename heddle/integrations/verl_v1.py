"""verl 0.9.1's V1 trainer (``trainer.use_v1=true``, its default): prompts in, trajectories out
through TransferQueue, as verl's own ``AgentLoopManagerTQ`` does.

``TaskRunnerV1`` calls ``generate_sequences(batch)`` with a ``TensorDict`` of prompts (one row
per prompt, a ``uid`` each, ``global_steps`` and, for validation, ``validate``) and returns at
once; its replay buffer then reads TransferQueue until every prompt's group is done. Here the
batch becomes one Heddle rollout (group size ``rollout.n``, or ``val_kwargs.n`` when
validating), submitted before ``generate_sequences`` returns, and a background thread streams
its trajectories into TransferQueue (partition ``train`` or ``val``) as each group completes:

- per prompt, key ``<uid>``: tag ``{"status": "running"}`` once submitted, then
  ``"finished"`` when all of its group came back, or ``"failure"`` if the stream broke first;
- per trajectory, key ``<uid>_<session>_0`` (session = its index in the group): the fields of
  ``AgentLoopOutput.as_dict()`` (``prompts``, ``responses``, ``response_mask``,
  ``rollout_log_probs``, ``rm_scores``, ``num_turns``, ``metrics``, ``extra_fields``) plus
  ``loss_mask``, ``input_ids``, ``position_ids``, ``multi_modal_inputs`` and the prompt row's
  own fields with ``session_id``, as ``AgentLoopWorkerTQ._agent_loop_postprocess`` puts them,
  and Heddle's ``heddle_logprob_mask`` / ``heddle_traj_id`` / ``heddle_group_id`` /
  ``heddle_finish_reason`` / ``heddle_reason``; tags ``status``, ``prompt_len``,
  ``response_len``, ``seq_len``, ``global_steps``, and ``min_global_steps`` /
  ``max_global_steps`` = the lowest and highest Heddle weight version its generations ran on
  (``heddle.integrations.verl_rollout`` publishes verl's step ``n`` as version ``n``).

A failed or aborted trajectory is a row like the others with ``response_mask`` and
``rm_scores`` all 0 (it trains nothing); its reason is in ``heddle_reason``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from heddle.client import HeddleClient
from heddle.events import Completed
from heddle.integrations import verl_compat
from heddle.integrations.batch import BatchRequest, no_event_row
from heddle.integrations.verl_batch import UNTRAINED_REASONS, messages_of, task_of
from heddle.rollout.submission import TaskOptions

log = logging.getLogger(__name__)

TQ_POPPED = ("validate", "__rollout_n__", "__do_sample__")
"""Row fields verl's TQ worker takes out of a prompt before it runs (not stored back)."""


@dataclass(frozen=True)
class PromptBatch:
    """verl's prompts as Heddle reads them: one row per prompt."""

    rows: list[dict[str, Any]]
    uids: list[str]
    partition_id: str
    group_size: int
    validate: bool
    global_steps: int


def prompt_batch(batch: Any, rollout: Any) -> PromptBatch:
    """The rows of verl's ``TensorDict`` of prompts (``ValueError`` for rows asking for
    different group sizes: one Heddle rollout has one)."""
    rows = verl_compat.tensordict_rows(batch)
    validate = bool(rows[0].get("validate", False)) if rows else False
    default_n = int(rollout.val_kwargs.n if validate else rollout.n)
    sizes = {int(row.get("__rollout_n__", default_n)) for row in rows}
    if len(sizes) > 1:
        raise ValueError(f"one Heddle rollout has one group size; the rows ask for {sorted(sizes)}")
    return PromptBatch(
        rows=[{k: v for k, v in row.items() if k not in TQ_POPPED} for row in rows],
        uids=[str(row["uid"]) for row in rows],
        partition_id="val" if validate else "train",
        group_size=sizes.pop() if sizes else default_n,
        validate=validate,
        global_steps=int(rows[0].get("global_steps", 0)) if rows else 0,
    )


def request_of_rows(prompts: PromptBatch, rollout: Any, heddle: Mapping[str, Any]) -> BatchRequest:
    """The Heddle rollout of ``prompts``: one task per row (``heddle.integrations.verl_batch``
    reads tasks and chats the same way for both trainers)."""
    chats = [messages_of(row["raw_prompt"]) for row in prompts.rows]
    tasks = [
        task_of(row.get("extra_info"), row.get("reward_model"), chat)
        for row, chat in zip(prompts.rows, chats, strict=True)
    ]
    temperature = rollout.val_kwargs.temperature if prompts.validate else rollout.temperature
    response_length = int(rollout.response_length)
    options = TaskOptions(
        group_size=prompts.group_size,
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
        labels={"trainer": "verl", "global_steps": str(prompts.global_steps)},
    )


def trajectory_record(
    trajectory: Completed, row: Mapping[str, Any], session: int, response_length: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The TransferQueue fields and tags of one trajectory (module docstring)."""
    import torch

    trained = trajectory.finish_reason not in UNTRAINED_REASONS
    length = min(len(trajectory.response_token_ids), response_length)
    prompt = torch.tensor(list(trajectory.prompt_token_ids), dtype=torch.int64)
    response = torch.tensor(list(trajectory.response_token_ids[:length]), dtype=torch.int64)
    mask = list(trajectory.loss_mask[:length]) if trained else [0] * length
    logprob_mask = list(trajectory.logprob_mask[:length]) or [1] * length
    rm_scores = torch.zeros(length, dtype=torch.float32)
    if length and trained:
        rm_scores[-1] = float(trajectory.reward)
    input_ids = torch.cat([prompt, response])
    versions = list(trajectory.weight_versions) or [0]
    extra = {"reward_extra_info": {}, "min_global_steps": min(versions),
             "max_global_steps": max(versions)}  # fmt: skip
    fields: dict[str, Any] = {
        "prompts": prompt,
        "responses": response,
        "response_mask": torch.tensor(mask, dtype=torch.int64),
        "rollout_log_probs": torch.tensor(
            list(trajectory.response_logprobs[:length]), dtype=torch.float32
        ),
        "rm_scores": rm_scores,
        "num_turns": 1 + trajectory.num_steps + _tool_spans(mask),
        "metrics": _metrics(trajectory),
        "extra_fields": extra,
        **{k: v for k, v in row.items() if k != "agent_name"},
        "session_id": session,
        "loss_mask": torch.tensor(mask, dtype=torch.int64),
        "input_ids": input_ids,
        "position_ids": torch.arange(len(input_ids), dtype=torch.int64),
        "multi_modal_inputs": {},
        "heddle_logprob_mask": torch.tensor(logprob_mask, dtype=torch.int64),
        "heddle_traj_id": trajectory.traj_id,
        "heddle_group_id": trajectory.group_id,
        "heddle_finish_reason": trajectory.finish_reason,
        "heddle_reason": trajectory.reason,
    }
    tags = {
        "status": "success",
        "prompt_len": len(prompt),
        "response_len": length,
        "seq_len": len(input_ids),
        "global_steps": row.get("global_steps", 0),
        "min_global_steps": extra["min_global_steps"],
        "max_global_steps": extra["max_global_steps"],
    }
    return fields, tags


def _tool_spans(mask: Sequence[int]) -> int:
    return sum(1 for a, b in itertools.pairwise(mask) if a == 1 and b == 0)


def _metrics(trajectory: Completed) -> dict[str, float]:
    timings = trajectory.timings
    return {"generate_sequences": timings.prefill_s + timings.decode_s,
            "tool_calls": timings.tool_s, "compute_score": 0.0, "num_preempted": -1}  # fmt: skip


class TransferQueueSink:
    """Where the trajectories go: verl's TransferQueue (``transfer_queue``, already
    initialised in the trainer's process by ``TaskRunnerV1``)."""

    def __init__(self) -> None:
        import transfer_queue

        self.tq = transfer_queue

    def prompt_status(self, uids: Sequence[str], partition_id: str, status: str) -> None:
        self.tq.kv_batch_put(
            keys=list(uids), partition_id=partition_id, tags=[{"status": status} for _ in uids]
        )

    def trajectories(
        self, keys: Sequence[str], partition_id: str,
        fields: Sequence[dict[str, Any]], tags: Sequence[dict[str, Any]],
    ) -> None:  # fmt: skip
        self.tq.kv_batch_put(
            keys=list(keys),
            partition_id=partition_id,
            fields=verl_compat.list_of_dict_to_tensordict(list(fields)),
            tags=list(tags),
        )


class V1Rollout:
    """One ``generate_sequences`` call: submit, then stream into the sink (module docstring)."""

    def __init__(
        self, prompts: PromptBatch, request: BatchRequest, client: HeddleClient,
        sink: TransferQueueSink, response_length: int,
    ) -> None:  # fmt: skip
        self.prompts = prompts
        self.request = request
        self.client = client
        self.sink = sink
        self.response_length = response_length
        self.rollout_id = ""
        self.done_uids: set[str] = set()

    async def run(self, submitted: concurrent.futures.Future[str]) -> None:
        try:
            async with self.client:
                self.rollout_id = await _submit(self.client, self.request)
                self.sink.prompt_status(self.prompts.uids, self.prompts.partition_id, "running")
                submitted.set_result(self.rollout_id)
                await self._stream()
        except BaseException as exc:
            if not submitted.done():
                submitted.set_exception(exc)
            left = [uid for uid in self.prompts.uids if uid not in self.done_uids]
            if left and self.rollout_id:
                self.sink.prompt_status(left, self.prompts.partition_id, "failure")
            raise

    async def _stream(self) -> None:
        n = self.prompts.group_size
        groups: dict[int, dict[int, Completed]] = {}
        async for trajectory in self.client.completions(self.rollout_id):
            group = groups.setdefault(trajectory.index // n, {})
            group.setdefault(trajectory.index % n, trajectory)
            if len(group) == n:
                self._put_group(trajectory.index // n, group)
        await self.client.wait(self.rollout_id)
        for g in range(len(self.prompts.uids)):
            if self.prompts.uids[g] not in self.done_uids:
                group = groups.get(g, {})
                for k in range(n):
                    group.setdefault(k, no_event_row(self.rollout_id, g * n + k, self.request))
                self._put_group(g, group)

    def _put_group(self, g: int, group: Mapping[int, Completed]) -> None:
        uid, row = self.prompts.uids[g], self.prompts.rows[g]
        records = [trajectory_record(group[k], row, k, self.response_length) for k in sorted(group)]
        keys = [f"{uid}_{k}_0" for k in sorted(group)]
        fields = [fields for fields, _ in records]
        tags = [tags for _, tags in records]
        self.sink.trajectories(keys, self.prompts.partition_id, fields, tags)
        self.sink.prompt_status([uid], self.prompts.partition_id, "finished")
        self.done_uids.add(uid)


async def _submit(client: HeddleClient, request: BatchRequest) -> str:
    return await client.submit(
        request.tasks,
        environment=request.environment,
        policy=request.policy,
        task_options=request.task_options,
        tokenizer=request.tokenizer,
        messages=request.messages,
        labels=request.labels,
    )


def start(rollout: V1Rollout, timeout_s: float = 300.0) -> tuple[str, threading.Thread]:
    """Run ``rollout`` in a background thread; its rollout id once submitted (the
    submission's error is raised here)."""
    submitted: concurrent.futures.Future[str] = concurrent.futures.Future()
    thread = threading.Thread(
        target=_run_logged, args=(rollout, submitted), name="heddle-verl-v1", daemon=True
    )
    thread.start()
    return submitted.result(timeout=timeout_s), thread


def _run_logged(rollout: V1Rollout, submitted: concurrent.futures.Future[str]) -> None:
    try:
        asyncio.run(rollout.run(submitted))
    except BaseException:
        log.exception("heddle rollout %s for verl failed", rollout.rollout_id)
