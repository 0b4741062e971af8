"""Folding step events (generation started, generated, tool called, tool returned) into the
step's row and its trajectory's counters (see ``heddle.ledger.fold``)."""

from __future__ import annotations

from heddle.events import Generated, GenerationStarted, ToolCalled, ToolReturned
from heddle.events.arrays import num_items
from heddle.ledger.rows import StepRow, TrajectoryRow
from heddle.ledger.statuses import TrajectoryStatus

STEP_EVENTS = (GenerationStarted, Generated, ToolCalled, ToolReturned)


def apply_step(
    trajectory: TrajectoryRow,
    step: StepRow,
    event: GenerationStarted | Generated | ToolCalled | ToolReturned,
) -> None:
    """Fold one step event into its step row and trajectory row."""
    match event:
        case GenerationStarted():
            step.worker_id = event.worker_id
            step.num_input_tokens = num_items(event.input_token_ids)
            step.num_context_tokens = event.num_context_tokens
            step.num_cached_tokens = event.num_cached_tokens
            step.priority = event.priority
            step.queued_s = event.queued_s
            step.started_at = event.occurred_at
            trajectory.status = TrajectoryStatus.GENERATING
            trajectory.worker_id = event.worker_id
            trajectory.num_context_tokens = event.num_context_tokens
            if trajectory.started_at is None:
                trajectory.started_at = event.occurred_at
        case Generated():
            _apply_generated(trajectory, step, event)
        case ToolCalled():
            if step.tool_called_at is None:
                trajectory.num_tool_calls += 1
            step.tool = event.tool
            step.call_id = event.call_id
            step.tool_pool = event.pool
            step.tool_called_at = event.occurred_at
            trajectory.status = TrajectoryStatus.IN_TOOL
        case ToolReturned():
            trajectory.tool_s += event.duration_s - step.tool_s
            step.tool = event.tool
            step.call_id = event.call_id
            step.tool_status = event.status
            step.tool_exit_code = event.exit_code
            step.tool_s = event.duration_s
            step.num_tool_output_tokens = num_items(event.output_token_ids)
            step.executor_id = event.executor_id
            step.tool_returned_at = event.occurred_at
            if trajectory.status is TrajectoryStatus.IN_TOOL:
                trajectory.status = TrajectoryStatus.WAITING


def _apply_generated(trajectory: TrajectoryRow, step: StepRow, event: Generated) -> None:
    num_output_tokens = num_items(event.output_token_ids)
    if step.generated_at is None:
        trajectory.num_steps += 1
    trajectory.num_output_tokens += num_output_tokens - step.num_output_tokens
    trajectory.queue_s += event.queue_s - step.queue_s
    trajectory.prefill_s += event.prefill_s - step.prefill_s
    trajectory.decode_s += event.decode_s - step.decode_s
    trajectory.num_recomputed_tokens += event.num_recomputed_tokens - step.num_recomputed_tokens
    step.worker_id = event.worker_id
    step.num_output_tokens = num_output_tokens
    step.finish_reason = event.finish_reason
    step.queue_s = event.queue_s
    step.prefill_s = event.prefill_s
    step.decode_s = event.decode_s
    step.num_preemptions = event.num_preemptions
    step.num_recomputed_tokens = event.num_recomputed_tokens
    step.num_cached_tokens = max(step.num_cached_tokens, event.num_cached_tokens)
    step.generated_at = event.occurred_at
    if event.num_context_tokens:
        step.num_context_tokens = event.num_context_tokens
        trajectory.num_context_tokens = event.num_context_tokens
    trajectory.worker_id = event.worker_id
    trajectory.status = TrajectoryStatus.GENERATED
