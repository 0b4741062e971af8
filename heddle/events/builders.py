"""The trajectory events a data plane publishes, each kind built in one place from plain values
(pure). The worker adapts a trajectory's log to them (``heddle.workers.agent.records``), the
tool executor a call and its outcome (``heddle.workers.tools.call_runner``), the simulator its
counts (``heddle.sim.facts``). A worker's own events: ``heddle.events.worker_builders``.

Ids are derived from what they describe (``heddle.ids.derive_id``), so a step re-run after a crash
or a retried publish carries the same ``Nats-Msg-Id`` and JetStream drops the duplicate:

    <rollout>:<traj>:<step>:e<epoch>:generation_started | generated | tool_called
    <rollout>:<traj>:<step>:<part>:e<epoch>:interrupted
    <rollout>:<traj>:<step>:e<epoch>:failed[:<discriminator>]
    <rollout>:<traj>:e<epoch>:completed       <rollout>:<traj>:<migration>:e<epoch>:migrated
    <call>:tool_returned     (the call's id: <rollout>:<traj>:<step>:e<epoch>:call)

``e<epoch>`` names the hosting the event was written under (``Hosting``); an id names none for
the unnumbered hostings of older streams (epoch 0) and in the simulator's streams.

A builder keeps the lists it is given (the event owns them): a caller that keeps its own copies
them first.
"""

from __future__ import annotations

from dataclasses import dataclass

from heddle.events.base import FinishReason, TerminalReason, ToolStatus, TrajectoryTimings
from heddle.events.trajectory import (
    Completed,
    Failed,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    Migrated,
    ToolCalled,
    ToolReturned,
)
from heddle.ids import derive_id, epoch_part


@dataclass(frozen=True, slots=True)
class Hosting:
    """Whose events: a rollout's trajectory under one hosting (``TrajectoryEvent.epoch``)."""

    rollout_id: str
    traj_id: str
    epoch: int = 0
    is_named_in_ids: bool = True
    """Whether the events' ids carry the hosting (``e<epoch>``). A worker's do: the events of a
    worker whose hosting is over never share an id with its successor's, which JetStream would
    drop as duplicates of the zombie's. The simulator's do not: it runs no zombie, and its
    recordings keep the ids they always had."""

    @property
    def id_part(self) -> str | None:
        """The hosting's part of an event id (None: the id names no hosting)."""
        return epoch_part(self.epoch) if self.is_named_in_ids else None


def generation_started_event(
    hosting: Hosting,
    *,
    step: int,
    worker_id: str,
    input_token_ids: list[int],
    num_context_tokens: int,
    priority: float,
    now: float,
    command_stored_at: float = 0.0,
    command_received_at: float = 0.0,
    command_issued_at: float = 0.0,
) -> GenerationStarted:
    """``command_*``: of the command that started the step (0.0: it follows the previous one)."""
    return GenerationStarted(
        event_id=_step_id(hosting, step, "generation_started"),
        rollout_id=hosting.rollout_id,
        traj_id=hosting.traj_id,
        epoch=hosting.epoch,
        occurred_at=now,
        step=step,
        worker_id=worker_id,
        input_token_ids=input_token_ids,
        num_context_tokens=num_context_tokens,
        priority=priority,
        command_stored_at=command_stored_at,
        command_received_at=command_received_at,
        command_issued_at=command_issued_at,
    )


def generated_event(
    hosting: Hosting,
    *,
    step: int,
    worker_id: str,
    output_token_ids: list[int],
    finish_reason: FinishReason,
    num_context_tokens: int,
    queue_s: float,
    prefill_s: float,
    decode_s: float,
    num_preemptions: int,
    num_recomputed_tokens: int,
    now: float,
    output_logprobs: list[float] | None = None,
    num_cached_tokens: int = 0,
    num_warmed_tokens: int = 0,
    weight_version: int = 0,
    weights_wait_s: float = 0.0,
) -> Generated:
    """``output_logprobs``: None when the engine returned none."""
    return Generated(
        event_id=_step_id(hosting, step, "generated"),
        rollout_id=hosting.rollout_id,
        traj_id=hosting.traj_id,
        epoch=hosting.epoch,
        occurred_at=now,
        step=step,
        worker_id=worker_id,
        output_token_ids=output_token_ids,
        output_logprobs=output_logprobs if output_logprobs is not None else [],
        finish_reason=finish_reason,
        num_context_tokens=num_context_tokens,
        queue_s=queue_s,
        prefill_s=prefill_s,
        decode_s=decode_s,
        num_preemptions=num_preemptions,
        num_recomputed_tokens=num_recomputed_tokens,
        num_cached_tokens=num_cached_tokens,
        num_warmed_tokens=num_warmed_tokens,
        weight_version=weight_version,
        weights_wait_s=weights_wait_s,
    )


def generation_interrupted_event(
    hosting: Hosting,
    *,
    step: int,
    part: int | str,
    worker_id: str,
    output_token_ids: list[int],
    reason: str,
    queue_s: float,
    prefill_s: float,
    decode_s: float,
    now: float,
    output_logprobs: list[float] | None = None,
) -> GenerationInterrupted:
    """What an interrupted part of a step produced. ``part`` tells it from the step's other
    parts in its id (the worker: the tokens before it; the simulator: its request), so each
    part is stored once."""
    return GenerationInterrupted(
        event_id=derive_id(
            hosting.rollout_id, hosting.traj_id, step, part, hosting.id_part, "interrupted"
        ),
        rollout_id=hosting.rollout_id,
        traj_id=hosting.traj_id,
        epoch=hosting.epoch,
        occurred_at=now,
        step=step,
        worker_id=worker_id,
        output_token_ids=output_token_ids,
        output_logprobs=output_logprobs if output_logprobs is not None else [],
        reason=reason,
        queue_s=queue_s,
        prefill_s=prefill_s,
        decode_s=decode_s,
    )


def tool_called_event(
    hosting: Hosting, *, step: int, worker_id: str, call_id: str, tool: str, pool: str, now: float
) -> ToolCalled:
    return ToolCalled(
        event_id=_step_id(hosting, step, "tool_called"),
        rollout_id=hosting.rollout_id,
        traj_id=hosting.traj_id,
        epoch=hosting.epoch,
        occurred_at=now,
        step=step,
        worker_id=worker_id,
        call_id=call_id,
        tool=tool,
        pool=pool,
    )


@dataclass(frozen=True, slots=True)
class ResponseRecord:
    """A completed trajectory's tokens for the trainer (``Completed``; the simulator has none)."""

    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_logprobs: list[float]
    loss_mask: list[int]
    logprob_mask: list[int]


def completed_event(
    hosting: Hosting,
    *,
    worker_id: str,
    num_steps: int,
    num_output_tokens: int,
    timings: TrajectoryTimings,
    worker_history: list[str],
    num_recomputed_tokens: int,
    weight_versions: list[int],
    now: float,
    record: ResponseRecord | None = None,
    reward: float = 0.0,
    finish_reason: TerminalReason = "stop",
    reason: str = "",
    group_id: str = "",
    index: int = 0,
) -> Completed:
    """The trajectory's record (``record``: its tokens; None: the event carries none)."""
    return Completed(
        event_id=derive_id(hosting.rollout_id, hosting.traj_id, hosting.id_part, "completed"),
        rollout_id=hosting.rollout_id,
        traj_id=hosting.traj_id,
        epoch=hosting.epoch,
        worker_id=worker_id,
        occurred_at=now,
        num_steps=num_steps,
        prompt_token_ids=record.prompt_token_ids if record else [],
        response_token_ids=record.response_token_ids if record else [],
        response_logprobs=record.response_logprobs if record else [],
        loss_mask=record.loss_mask if record else [],
        logprob_mask=record.logprob_mask if record else [],
        reward=reward,
        finish_reason=finish_reason,
        reason=reason,
        num_output_tokens=num_output_tokens,
        timings=timings,
        worker_history=worker_history,
        num_recomputed_tokens=num_recomputed_tokens,
        group_id=group_id,
        index=index,
        weight_versions=weight_versions,
    )


def failed_event(
    hosting: Hosting,
    *,
    step: int,
    reason: str,
    worker_id: str,
    now: float,
    retryable: bool = False,
    finish_reason: TerminalReason = "error",
    group_id: str = "",
    index: int = 0,
    resubmitted_as: str = "",
    discriminator: str = "",
) -> Failed:
    """``discriminator``: tells apart failures of one step that must each be stored."""
    return Failed(
        event_id=derive_id(
            hosting.rollout_id,
            hosting.traj_id,
            step,
            hosting.id_part,
            "failed",
            discriminator or None,
        ),
        rollout_id=hosting.rollout_id,
        traj_id=hosting.traj_id,
        epoch=hosting.epoch,
        occurred_at=now,
        step=step,
        reason=reason,
        worker_id=worker_id,
        retryable=retryable,
        finish_reason=finish_reason,
        group_id=group_id,
        index=index,
        resubmitted_as=resubmitted_as,
    )


def migrated_event(
    hosting: Hosting,
    *,
    migration_id: str,
    source_worker_id: str,
    target_worker_id: str,
    num_context_tokens: int,
    num_bytes: int,
    transfer_s: float,
    now: float,
    target_epoch: int = 0,
) -> Migrated:
    """The source's side of a move (``hosting``: the source's; ``num_bytes``: of KV moved, 0
    when the target prefills the context again)."""
    return Migrated(
        event_id=derive_id(
            hosting.rollout_id, hosting.traj_id, migration_id, hosting.id_part, "migrated"
        ),
        rollout_id=hosting.rollout_id,
        traj_id=hosting.traj_id,
        epoch=hosting.epoch,
        target_epoch=target_epoch,
        occurred_at=now,
        source_worker_id=source_worker_id,
        target_worker_id=target_worker_id,
        num_context_tokens=num_context_tokens,
        num_bytes=num_bytes,
        kv_transferred=num_bytes > 0,
        transfer_s=transfer_s,
    )


def tool_returned_event(
    *,
    rollout_id: str,
    traj_id: str,
    step: int,
    call_id: str,
    tool: str,
    status: ToolStatus,
    output_token_ids: list[int],
    duration_s: float,
    executor_id: str,
    now: float,
    output: str = "",
    error: str = "",
    exit_code: int | None = None,
) -> ToolReturned:
    """A tool call's result. Its id derives from the call's, which names the hosting that made
    it: a redelivered call publishes a duplicate that JetStream drops, while a call made again by
    a worker that took the trajectory over is answered apart."""
    return ToolReturned(
        event_id=derive_id(call_id, "tool_returned"),
        rollout_id=rollout_id,
        occurred_at=now,
        traj_id=traj_id,
        step=step,
        call_id=call_id,
        tool=tool,
        status=status,
        output=output,
        error=error,
        exit_code=exit_code,
        output_token_ids=output_token_ids,
        duration_s=duration_s,
        executor_id=executor_id,
    )


def step_call_id(hosting: Hosting, step: int) -> str:
    """The id of the step's tool call under ``hosting``: a worker that took the trajectory over
    and calls again is not answered with (nor de-duplicated into) a zombie's call."""
    return _step_id(hosting, step, "call")


def _step_id(hosting: Hosting, step: int, kind: str) -> str:
    return derive_id(hosting.rollout_id, hosting.traj_id, step, hosting.id_part, kind)
