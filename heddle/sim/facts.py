"""The events the simulated data plane publishes, built like a live worker would build them.

Every event comes from the builders a live data plane uses (the trajectory events and the tool
result: ``heddle.events.builders``; registration and retirement: ``heddle.events.worker_builders``),
fed the simulator's counts: its ids name no hosting (``Hosting.is_named_in_ids``), though each event
carries the hosting it was written under (``SimTrajectory.epoch``). Token lists are pseudo-tokens
(zeros) of the right length: the deciders read their lengths, and a fresh list per event keeps
memory flat (nothing retains them unless events are recorded). ``Completed`` carries counts and
timings but no token lists. A step's ``GenerationStarted`` is built only for recorded runs (no
decider reads one).
"""

from __future__ import annotations

from dataclasses import dataclass

from heddle.events import (
    Completed,
    Failed,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    Migrated,
    ToolCalled,
    ToolReturned,
    WorkerRegistered,
    WorkerRetired,
)
from heddle.events.builders import (
    Hosting,
    completed_event,
    failed_event,
    generated_event,
    generation_interrupted_event,
    generation_started_event,
    migrated_event,
    step_call_id,
    tool_called_event,
    tool_returned_event,
)
from heddle.events.worker_builders import worker_registered_event, worker_retired_event
from heddle.ids import derive_id
from heddle.policy.batching import FinishedGeneration
from heddle.sim.sim_worker import SimWorker
from heddle.sim.trajectories import SimTrajectory

TOOL_NAME = "trace"


@dataclass(frozen=True, slots=True)
class RolloutFacts:
    """The events of one rollout's simulated trajectories (each method: the event a live
    worker's ``heddle.workers.agent.records`` function of that name builds)."""

    rollout_id: str

    def generation_started(self, t: SimTrajectory, now: float) -> GenerationStarted:
        return generation_started_event(
            self._hosting(t),
            step=t.step,
            worker_id=t.worker_id,
            input_token_ids=[0] * t.new_tokens,
            num_context_tokens=t.context_tokens,
            priority=t.priority,
            now=now,
        )

    def generated(
        self, t: SimTrajectory, done: FinishedGeneration, weights_wait_s: float = 0.0
    ) -> Generated:
        """The step's whole output: what an interrupted generation of it produced, then
        ``done``'s."""
        return generated_event(
            self._hosting(t),
            step=t.step,
            worker_id=t.worker_id,
            output_token_ids=[0] * (t.interrupted_tokens + done.num_output_tokens),
            finish_reason="stop" if t.is_last_step else "tool_call",
            num_context_tokens=done.num_context_tokens,
            queue_s=done.queue_s,
            prefill_s=done.prefill_s,
            decode_s=done.decode_s,
            num_preemptions=done.num_preemptions,
            num_recomputed_tokens=done.num_recomputed_tokens,
            weight_version=t.weight_versions[-1] if t.weight_versions else 0,
            weights_wait_s=weights_wait_s,
            now=done.finished_at,
        )

    def generation_interrupted(
        self, t: SimTrajectory, part: FinishedGeneration, reason: str
    ) -> GenerationInterrupted:
        return generation_interrupted_event(
            self._hosting(t),
            step=t.step,
            part=part.request_id,
            worker_id=t.worker_id,
            output_token_ids=[0] * part.num_output_tokens,
            reason=reason,
            queue_s=part.queue_s,
            prefill_s=part.prefill_s,
            decode_s=part.decode_s,
            now=part.finished_at,
        )

    def tool_called(self, t: SimTrajectory, now: float) -> ToolCalled:
        return tool_called_event(
            self._hosting(t),
            step=t.step,
            worker_id=t.worker_id,
            call_id=self._call_id(t, t.step),
            tool=TOOL_NAME,
            pool=t.spec.tool_pool,
            now=now,
        )

    def tool_returned(
        self, t: SimTrajectory, step: int, duration_s: float, now: float
    ) -> ToolReturned:
        return tool_returned_event(
            rollout_id=self.rollout_id,
            traj_id=t.traj_id,
            step=step,
            call_id=self._call_id(t, step),
            tool=TOOL_NAME,
            status="ok",
            output_token_ids=[0] * t.trace.steps[step].tool_output_tokens,
            duration_s=duration_s,
            executor_id="sim",
            now=now,
        )

    def completed(self, t: SimTrajectory) -> Completed:
        return completed_event(
            self._hosting(t),
            worker_id=t.worker_id,
            num_steps=len(t.trace.steps),
            num_output_tokens=t.num_output_tokens,
            timings=t.timings(),
            worker_history=list(t.worker_history),
            num_recomputed_tokens=t.num_recomputed_tokens,
            weight_versions=list(t.weight_versions),
            now=t.finished_at,
        )

    def failed(self, t: SimTrajectory, reason: str, now: float) -> Failed:
        return failed_event(
            self._hosting(t), step=t.step, reason=reason, worker_id=t.worker_id, now=now
        )

    def migrated(self, t: SimTrajectory, source: str, num_bytes: int, now: float) -> Migrated:
        """``t`` moved from ``source`` to its ``migration_target`` (the move is named by the
        step it left at and its two ends)."""
        return migrated_event(
            self._hosting(t),
            migration_id=derive_id(t.step, source, t.migration_target),
            source_worker_id=source,
            target_worker_id=t.migration_target,
            num_context_tokens=t.context_tokens,
            num_bytes=num_bytes,
            transfer_s=now - t.migration_started_at,
            now=now,
            target_epoch=t.migration_target_epoch,
        )

    def _hosting(self, t: SimTrajectory) -> Hosting:
        return Hosting(self.rollout_id, t.traj_id, t.epoch, is_named_in_ids=False)

    def _call_id(self, t: SimTrajectory, step: int) -> str:
        return step_call_id(self._hosting(t), step)


def worker_registered(
    worker: SimWorker, model: str, max_running: int, now: float
) -> WorkerRegistered:
    """A simulated worker's registration (again after a re-shard, with its new degree)."""
    return worker_registered_event(
        worker_id=worker.worker_id,
        incarnation=str(worker.incarnation) if worker.incarnation else "",
        engine="sim",
        model=model,
        tp_degree=worker.tp_degree,
        max_running=max_running,
        max_kv_tokens=worker.model.max_kv_tokens,
        can_export_kv=True,
        node=worker.node,
        gpu_ids=list(worker.gpu_ids),
        now=now,
    )


def worker_retired(
    worker: SimWorker, reshard_id: str, successor_id: str, hosted: list[str], now: float
) -> WorkerRetired:
    return worker_retired_event(
        worker_id=worker.worker_id,
        reshard_id=reshard_id,
        successor_worker_id=successor_id,
        trajectory_ids=hosted,
        gpu_ids=list(worker.gpu_ids),
        now=now,
    )
