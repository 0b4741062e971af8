"""One trainer batch as one Heddle rollout: submit, stream every trajectory, return them in
submission order with the rollout's metrics.

``run_batch`` returns exactly one ``Completed`` per submitted trajectory, ordered by ``index``
(group ``g`` of size ``n`` holds indices ``g*n .. g*n+n-1``): completed ones, failed or aborted
ones as ``HeddleClient.completions`` hands them over (``finish_reason``, ``reason``, reward 0.0),
and, for a trajectory that ended with no event at all (a cancelled rollout's trajectory still
waiting for admission), an ``aborted`` row with no response. A trainer batch never has holes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from heddle.client import HeddleClient
from heddle.events import ChatMessage, Completed
from heddle.rollout.submission import TaskOptions
from heddle.rollout.summary import RolloutSummary

T = TypeVar("T")

NO_EVENT_REASON = "aborted: the trajectory ended with no event (its rollout was cancelled first)"


@dataclass(frozen=True)
class BatchRequest:
    """What a trainer's batch asks of Heddle: ``tasks`` of ``environment``, each sampled
    ``task_options.group_size`` times, with the trainer's own prompts (ids or chats, one per
    task) when it has them."""

    tasks: Sequence[Mapping[str, Any]]
    environment: str
    task_options: TaskOptions
    prompt_token_ids: Sequence[Sequence[int]] | None = None
    messages: Sequence[Sequence[ChatMessage | Mapping[str, str]]] | None = None
    policy: str = "heddle"
    tokenizer: str = "byte"
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchResult:
    rollout_id: str
    trajectories: list[Completed]
    """One per submitted trajectory, ordered by ``index``."""
    metrics: dict[str, float]
    """``heddle/...`` figures of the rollout (``batch_metrics``)."""


async def run_batch(client: HeddleClient, request: BatchRequest) -> BatchResult:
    """Submit ``request`` as one rollout and collect all of its trajectories (module docstring).
    ``ValueError`` from ``HeddleClient.submit`` for a bad task or prompt."""
    started = time.perf_counter()
    rollout_id = await client.submit(
        request.tasks,
        environment=request.environment,
        policy=request.policy,
        task_options=request.task_options,
        tokenizer=request.tokenizer,
        prompt_token_ids=request.prompt_token_ids,
        messages=request.messages,
        labels=request.labels,
    )
    by_index: dict[int, Completed] = {}
    async for trajectory in client.completions(rollout_id):
        by_index.setdefault(trajectory.index, trajectory)
    summary = await client.wait(rollout_id)
    total = len(request.tasks) * request.task_options.group_size
    trajectories = [by_index.get(i) or no_event_row(rollout_id, i, request) for i in range(total)]
    metrics = batch_metrics(trajectories, summary)
    metrics["heddle/wall_s"] = time.perf_counter() - started
    return BatchResult(rollout_id, trajectories, metrics)


def no_event_row(rollout_id: str, index: int, request: BatchRequest) -> Completed:
    """The ``aborted`` row of trajectory ``index``, which ended with no event."""
    group = index // request.task_options.group_size
    return Completed(
        event_id=f"{rollout_id}:t{index:06d}:no-event",
        rollout_id=rollout_id,
        traj_id=f"t{index:06d}",
        occurred_at=time.time(),
        num_steps=0,
        prompt_token_ids=list(request.prompt_token_ids[group]) if request.prompt_token_ids else [],
        finish_reason="aborted",
        reason=NO_EVENT_REASON,
        group_id=f"g{group:05d}",
        index=index,
    )


def batch_metrics(trajectories: Sequence[Completed], summary: RolloutSummary) -> dict[str, float]:
    """The rollout's figures for a trainer's metrics: makespan, queueing, tool and migration
    time (means over trajectories, model seconds), preemptions, migrations, finish reasons."""
    count = max(1, len(trajectories))
    metrics: dict[str, float] = {
        "heddle/makespan_s": summary.makespan_s,
        "heddle/throughput_tok_s": summary.throughput_tok_s,
        "heddle/num_preemptions": float(summary.num_preemptions),
        "heddle/num_migrations": float(summary.num_migrations),
        "heddle/recomputed_tokens": float(summary.recomputed_tokens),
        "heddle/queue_s_mean": sum(t.timings.queue_s for t in trajectories) / count,
        "heddle/tool_s_mean": sum(t.timings.tool_s for t in trajectories) / count,
        "heddle/migration_s_mean": sum(t.timings.migration_s for t in trajectories) / count,
        "heddle/num_trajectories": float(len(trajectories)),
    }
    for trajectory in trajectories:
        key = f"heddle/finish_reason/{trajectory.finish_reason}"
        metrics[key] = metrics.get(key, 0.0) + 1.0
    return metrics


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end from synchronous code (a trainer's rollout hook), in this
    thread when no event loop runs here, else in a fresh thread with its own loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
