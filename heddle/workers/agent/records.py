"""The events and commands a worker publishes, built from a trajectory's log (pure).

Each trajectory event is built by ``heddle.events.builders`` (where its id is formed) from what
the log, the command's arrival and the engine's result say; the simulator adapts its own counts to
the same builders (``heddle.sim.facts``). Every event carries the hosting it was written under
(``log.epoch``), and its id names that hosting (``e<epoch>``: none for the unnumbered hostings of
older streams), so the events of a worker whose hosting is over never share an id with its
successor's, and the successor's are never dropped as duplicates of a zombie's. A tool call's id
is ``<rollout>:<traj>:<step>:e<epoch>:call``.
"""

from __future__ import annotations

from heddle.events import (
    Completed,
    Failed,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    Migrated,
    MigrateIn,
    Preempted,
    TerminalReason,
    ToolCall,
    ToolCalled,
    ToolRequest,
    TrajectorySpec,
    TrajectoryTimings,
)
from heddle.events.builders import (
    Hosting,
    ResponseRecord,
    completed_event,
    failed_event,
    generated_event,
    generation_interrupted_event,
    generation_started_event,
    migrated_event,
    step_call_id,
    tool_called_event,
)
from heddle.ids import derive_id, resubmission_id
from heddle.workers.agent.table import CommandArrival
from heddle.workers.agent.trajectory_log import TrajectoryLog
from heddle.workers.engines.base import GenerationResult


def generation_started(
    log: TrajectoryLog,
    *,
    step: int,
    worker_id: str,
    input_token_ids: list[int],
    num_context_tokens: int,
    priority: float,
    now: float,
    arrival: CommandArrival | None = None,
) -> GenerationStarted:
    """``arrival``: the command that started the step (None: it follows the previous one)."""
    return generation_started_event(
        _hosting(log),
        step=step,
        worker_id=worker_id,
        input_token_ids=input_token_ids,
        num_context_tokens=num_context_tokens,
        priority=priority,
        now=now,
        command_stored_at=arrival.stored_at if arrival is not None else 0.0,
        command_received_at=arrival.received_at if arrival is not None else 0.0,
        command_issued_at=arrival.issued_at if arrival is not None else 0.0,
    )


def generated(
    log: TrajectoryLog,
    *,
    step: int,
    worker_id: str,
    result: GenerationResult,
    num_context_tokens: int,
    num_recomputed_tokens: int,
    now: float,
    num_warmed_tokens: int = 0,
    weight_version: int = 0,
    weights_wait_s: float = 0.0,
) -> Generated:
    return generated_event(
        _hosting(log),
        step=step,
        worker_id=worker_id,
        output_token_ids=list(result.output_token_ids),
        output_logprobs=list(result.output_logprobs),
        finish_reason=result.finish_reason,
        num_context_tokens=num_context_tokens,
        queue_s=result.queue_s,
        prefill_s=result.prefill_s,
        decode_s=result.decode_s,
        num_preemptions=result.num_preemptions,
        num_recomputed_tokens=num_recomputed_tokens,
        num_cached_tokens=result.num_cached_tokens,
        num_warmed_tokens=num_warmed_tokens,
        weight_version=weight_version,
        weights_wait_s=weights_wait_s,
        now=now,
    )


def generation_interrupted(
    log: TrajectoryLog,
    *,
    step: int,
    worker_id: str,
    result: GenerationResult,
    reason: str,
    now: float,
) -> GenerationInterrupted:
    """What an interrupted part of the step produced; its id counts the tokens before it, so
    each part of a step is stored once."""
    num_before = len(log.steps[step].partial_token_ids) if step < len(log.steps) else 0
    return generation_interrupted_event(
        _hosting(log),
        step=step,
        part=num_before,
        worker_id=worker_id,
        output_token_ids=list(result.output_token_ids),
        output_logprobs=list(result.output_logprobs),
        reason=reason,
        queue_s=result.queue_s,
        prefill_s=result.prefill_s,
        decode_s=result.decode_s,
        now=now,
    )


def tool_call_id(log: TrajectoryLog, step: int) -> str:
    """A new call of the step, under the log's hosting (``heddle.events.builders.step_call_id``)."""
    return step_call_id(_hosting(log), step)


def tool_call(
    log: TrajectoryLog,
    *,
    step: int,
    request: ToolRequest,
    pool: str,
    timeout_s: float,
    time_scale: float,
    now: float,
    call_id: str = "",
) -> ToolCall:
    """The step's tool call (``call_id``: of a call made before, sent again)."""
    call_id = call_id or tool_call_id(log, step)
    return ToolCall(
        command_id=call_id,
        rollout_id=log.rollout_id,
        issued_at=now,
        traj_id=log.traj_id,
        step=step,
        call_id=call_id,
        pool=pool,
        request=request,
        timeout_s=timeout_s,
        time_scale=time_scale,
    )


def tool_called(log: TrajectoryLog, call: ToolCall, *, worker_id: str, now: float) -> ToolCalled:
    return tool_called_event(
        _hosting(log),
        step=call.step,
        worker_id=worker_id,
        call_id=call.call_id,
        tool=str(type(call.request).__struct_config__.tag),
        pool=call.pool,
        now=now,
    )


def completed(
    log: TrajectoryLog,
    *,
    worker_id: str,
    reward: float,
    finish_reason: TerminalReason,
    time_scale: float,
    now: float,
    reason: str = "",
) -> Completed:
    """The trajectory's full record: tokens, logprobs, loss mask, reward and timings (``reason``:
    the failure's, when a client hands a terminal ``Failed`` over as a completion)."""
    response, logprobs, mask = log.response()
    outputs = log.generated_events()
    record = ResponseRecord(
        prompt_token_ids=log.prompt_token_ids(),
        response_token_ids=response,
        response_logprobs=logprobs,
        loss_mask=mask,
        logprob_mask=log.logprob_mask(),
    )
    return completed_event(
        _hosting(log),
        worker_id=worker_id,
        now=now,
        num_steps=log.num_steps,
        record=record,
        reward=reward,
        finish_reason=finish_reason,
        reason=reason,
        num_output_tokens=sum(len(event.output_token_ids) for event in outputs),
        timings=_timings(log, time_scale, now),
        worker_history=log.worker_history(),
        num_recomputed_tokens=sum(event.num_recomputed_tokens for event in outputs),
        group_id=log.spec.group_id if log.spec else "",
        index=log.spec.index if log.spec else 0,
        weight_versions=list(dict.fromkeys(event.weight_version for event in outputs)),
    )


def failed(
    log: TrajectoryLog,
    *,
    reason: str,
    worker_id: str,
    now: float,
    retryable: bool = False,
    discriminator: str = "",
    finish_reason: TerminalReason = "error",
) -> Failed:
    step = log.current_step
    spec = log.spec
    resubmitted_as = ""
    if finish_reason == "stale" and not retryable and spec and spec.attempt + 1 < spec.max_attempts:
        resubmitted_as = resubmission_id(log.traj_id, spec.attempt + 1)
        reason = f"{reason}; resubmitted as {resubmitted_as}"
    return failed_event(
        _hosting(log),
        step=step,
        reason=reason,
        worker_id=worker_id,
        now=now,
        retryable=retryable,
        finish_reason=finish_reason,
        group_id=spec.group_id if spec else "",
        index=spec.index if spec else 0,
        resubmitted_as=resubmitted_as,
        discriminator=discriminator,
    )


def preempted(
    log: TrajectoryLog, *, worker_id: str, by_traj_id: str, command_id: str, now: float
) -> Preempted:
    step = log.current_step
    return Preempted(
        event_id=derive_id(
            log.rollout_id, log.traj_id, step, _hosting(log).id_part, "preempted", command_id
        ),
        rollout_id=log.rollout_id,
        traj_id=log.traj_id,
        epoch=log.epoch,
        occurred_at=now,
        step=step,
        worker_id=worker_id,
        by_traj_id=by_traj_id,
        kv_kept=True,
    )


def migrate_in(
    log: TrajectoryLog,
    *,
    spec: TrajectorySpec,
    source_worker_id: str,
    target_worker_id: str,
    migration_id: str,
    cache_key: str,
    priority: float,
    now: float,
    target_epoch: int = 0,
) -> MigrateIn:
    return MigrateIn(
        command_id=derive_id(migration_id, "migrate_in"),
        rollout_id=log.rollout_id,
        issued_at=now,
        worker_id=target_worker_id,
        sent_by=source_worker_id,
        traj_id=log.traj_id,
        spec=spec,
        source_worker_id=source_worker_id,
        migration_id=migration_id,
        cache_key=cache_key,
        num_context_tokens=log.num_context_tokens,
        priority=priority,
        epoch=target_epoch,
    )


def migrated(
    log: TrajectoryLog,
    *,
    source_worker_id: str,
    target_worker_id: str,
    migration_id: str,
    num_bytes: int,
    transfer_s: float,
    now: float,
    target_epoch: int = 0,
) -> Migrated:
    return migrated_event(
        _hosting(log),
        migration_id=migration_id,
        source_worker_id=source_worker_id,
        target_worker_id=target_worker_id,
        num_context_tokens=log.num_context_tokens,
        num_bytes=num_bytes,
        transfer_s=transfer_s,
        now=now,
        target_epoch=target_epoch,
    )


def _timings(log: TrajectoryLog, time_scale: float, now: float) -> TrajectoryTimings:
    started_at = log.submitted_at if log.submitted_at is not None else now
    parts: list[Generated | GenerationInterrupted] = [*log.generated_events()]
    parts += [part for step in log.steps for part in step.interrupted]
    return TrajectoryTimings(
        queue_s=sum(event.queue_s for event in parts),
        prefill_s=sum(event.prefill_s for event in parts),
        decode_s=sum(event.decode_s for event in parts),
        tool_s=sum(result.duration_s for result in log.tool_results()),  # model s already
        migration_s=log.migration_s,
        total_s=max(0.0, now - started_at) * time_scale,
    )


def _hosting(log: TrajectoryLog) -> Hosting:
    return Hosting(log.rollout_id, log.traj_id, log.epoch)
