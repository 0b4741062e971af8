"""Event sequences covering every event kind, for the ledger and replay tests."""

from __future__ import annotations

from heddle.events import (
    Completed,
    DeadLettered,
    EventT,
    Failed,
    Generated,
    GenerationStarted,
    Migrated,
    MigrationRequested,
    Predicted,
    Preempted,
    Prioritized,
    RolloutCancelled,
    RolloutFinished,
    RolloutSubmitted,
    ToolCalled,
    ToolReturned,
    TrajectoryAbortRequested,
    TrajectoryPlaced,
    TrajectoryReprioritizeRequested,
    TrajectorySpec,
    TrajectorySubmitted,
    TrajectoryTimings,
    WorkerDrained,
    WorkerDrainRequested,
    WorkerFailed,
    WorkerHeartbeat,
    WorkerRegistered,
)
from heddle.ids import derive_id, trajectory_id

T0 = 1_700_000_000.0


def rollout_events(rollout_id: str, num_trajectories: int = 3, num_steps: int = 2) -> list[EventT]:
    """A finished rollout: every trajectory runs ``num_steps`` generations with tool calls in
    between; trajectory 1 migrates and is preempted, the last one fails. Each is placed on w00
    under hosting 1; trajectory 1 moves to w01 under hosting 2 (a history the gate accepts)."""
    events: list[EventT] = [
        RolloutSubmitted(
            event_id=derive_id(rollout_id, "submitted"),
            rollout_id=rollout_id,
            occurred_at=T0,
            policy="heddle",
            num_trajectories=num_trajectories,
            source="workload:coding",
            labels={"step": "7"},
        )
    ]
    for index in range(num_trajectories):
        events += _trajectory(rollout_id, index, num_steps, fails=index == num_trajectories - 1)
    events.append(
        RolloutFinished(
            event_id=derive_id(rollout_id, "finished"),
            rollout_id=rollout_id,
            occurred_at=T0 + 100,
            num_completed=num_trajectories - 1,
            num_failed=1,
            makespan_s=99.5,
            num_output_tokens=1234,
        )
    )
    return events


def _trajectory(rollout_id: str, index: int, num_steps: int, *, fails: bool) -> list[EventT]:
    traj = trajectory_id(index)
    ids = {"rollout_id": rollout_id, "traj_id": traj}
    at = T0 + index

    def eid(*parts: object) -> str:
        return derive_id(rollout_id, traj, *parts)

    events: list[EventT] = [
        TrajectorySubmitted(
            event_id=eid("submitted"),
            occurred_at=at,
            spec=TrajectorySpec(
                group_id=f"g{index // 2}",
                index=index,
                environment="trace",
                prompt_token_ids=list(range(10 + index)),
            ),
            **ids,
        ),
        TrajectoryPlaced(
            event_id=eid("placed", 0), occurred_at=at + 0.1, worker_id="w00", epoch=1, **ids
        ),
        Predicted(
            event_id=eid(-1, "predicted"),
            occurred_at=at + 0.2,
            step=-1,
            predicted_remaining_tokens=500.0 + index,
            predictor="oracle",
            **ids,
        ),
        Prioritized(
            event_id=eid("prioritized", 0),
            occurred_at=at + 0.3,
            worker_id="w00",
            priority=2.5,
            **ids,
        ),
    ]
    for step in range(num_steps):
        at_step = at + 1 + step * 10
        events += _step(rollout_id, traj, step, at_step, is_last=step == num_steps - 1)
        if index == 1 and step == 0:
            events += _migration_and_preemption(rollout_id, traj, at_step + 5)
    holder = {"worker_id": "w01", "epoch": 2} if index == 1 else {"worker_id": "w00", "epoch": 1}
    if fails:
        events.append(
            Failed(
                event_id=eid("failed"),
                occurred_at=at + 90,
                step=num_steps,
                reason="engine died",
                **holder,
                **ids,
            )
        )
    else:
        events.append(
            Completed(
                event_id=eid("completed"),
                occurred_at=at + 95,
                num_steps=num_steps,
                prompt_token_ids=list(range(10 + index)),
                response_token_ids=list(range(40)),
                reward=1.0 if index % 2 == 0 else 0.0,
                num_output_tokens=32 * num_steps,
                timings=TrajectoryTimings(queue_s=1.0, decode_s=5.0, tool_s=2.0, total_s=9.5),
                **holder,
                **ids,
            )
        )
    return events


def _step(rollout_id: str, traj: str, step: int, at: float, *, is_last: bool) -> list[EventT]:
    ids = {"rollout_id": rollout_id, "traj_id": traj}

    def eid(kind: str) -> str:
        return derive_id(rollout_id, traj, step, kind)

    worker = "w01" if traj == trajectory_id(1) and step > 0 else "w00"
    epoch = 2 if worker == "w01" else 1
    events: list[EventT] = [
        GenerationStarted(
            event_id=eid("generation_started"),
            occurred_at=at,
            step=step,
            worker_id=worker,
            input_token_ids=[7] * (5 if step else 0),
            num_context_tokens=20 + step * 40,
            num_cached_tokens=10 * step,
            queued_s=0.25,
            epoch=epoch,
            **ids,
        ),
        Generated(
            event_id=eid("generated"),
            occurred_at=at + 2,
            step=step,
            worker_id=worker,
            output_token_ids=list(range(32)),
            output_logprobs=[-0.1] * 32,
            finish_reason="stop" if is_last else "tool_call",
            num_context_tokens=52 + step * 40,
            queue_s=0.5,
            prefill_s=0.125,
            decode_s=1.5,
            epoch=epoch,
            **ids,
        ),
    ]
    if not is_last:
        events += [
            ToolCalled(
                event_id=eid("tool_called"),
                occurred_at=at + 2.5,
                step=step,
                worker_id=worker,
                call_id=eid("call"),
                tool="python",
                epoch=epoch,
                **ids,
            ),
            ToolReturned(
                event_id=eid("tool_returned"),
                occurred_at=at + 4,
                step=step,
                call_id=eid("call"),
                tool="python",
                status="ok",
                output="42",
                exit_code=0,
                output_token_ids=[7] * 5,
                duration_s=1.5,
                executor_id="x1",
                **ids,
            ),
        ]
    return events


def _migration_and_preemption(rollout_id: str, traj: str, at: float) -> list[EventT]:
    ids = {"rollout_id": rollout_id, "traj_id": traj}
    return [
        MigrationRequested(
            event_id=derive_id(rollout_id, traj, "migration_requested", 1),
            occurred_at=at,
            source_worker_id="w00",
            target_worker_id="w01",
            predicted_remaining_tokens=300.0,
            new_rank=4,
            target_epoch=2,
            **ids,
        ),
        Migrated(
            event_id=derive_id(rollout_id, traj, "migrated", 1),
            occurred_at=at + 1,
            source_worker_id="w00",
            target_worker_id="w01",
            num_context_tokens=57,
            num_bytes=4096,
            kv_transferred=True,
            transfer_s=0.75,
            epoch=1,
            target_epoch=2,
            **ids,
        ),
        Preempted(
            event_id=derive_id(rollout_id, traj, "preempted", 1),
            occurred_at=at + 2,
            step=0,
            worker_id="w01",
            epoch=2,
            **ids,
        ),
    ]


def worker_events() -> list[EventT]:
    return [
        WorkerRegistered(
            event_id="w00:registered",
            occurred_at=T0,
            worker_id="w00",
            engine="sim",
            tp_degree=2,
            max_kv_tokens=100_000,
        ),
        WorkerRegistered(event_id="w01:registered", occurred_at=T0, worker_id="w01", engine="sim"),
        WorkerHeartbeat(
            event_id="w00:hb:1",
            occurred_at=T0 + 5,
            worker_id="w00",
            sequence=1,
            num_running=3,
            kv_usage=0.5,
        ),
        WorkerHeartbeat(
            event_id="w00:hb:2", occurred_at=T0 + 10, worker_id="w00", sequence=2, num_running=1
        ),
        WorkerDrained(event_id="w00:drained", occurred_at=T0 + 50, worker_id="w00"),
        WorkerFailed(
            event_id="w01:failed",
            occurred_at=T0 + 60,
            worker_id="w01",
            reason="oom",
            trajectory_ids=["t000001"],
        ),
        WorkerHeartbeat(event_id="w02:hb:9", occurred_at=T0 + 61, worker_id="w02", sequence=9),
    ]


def dead_letter() -> DeadLettered:
    return DeadLettered(
        event_id="deadletter:ledger:HEDDLE_EVENTS:3",
        rollout_id="r1",
        occurred_at=T0 + 1,
        consumer="ledger",
        subject="heddle.evt.traj.r1.t000000.generated",
        stream_sequence=3,
        reason="event: malformed JSON",
        payload="{oops",
    )


def cancelled(rollout_id: str) -> RolloutCancelled:
    return RolloutCancelled(
        event_id=derive_id(rollout_id, "cancelled"),
        rollout_id=rollout_id,
        occurred_at=T0 + 3,
        reason="operator",
    )


def everything() -> list[EventT]:
    """Two rollouts, workers, a dead letter, a cancelled rollout and the cancellation of one
    never submitted ("ghost": it must leave no row), interleaved."""
    first = rollout_events("r1")
    second = rollout_events("r2", num_trajectories=2, num_steps=3)
    mixed: list[EventT] = []
    for index in range(max(len(first), len(second))):
        mixed += first[index : index + 1] + second[index : index + 1]
    ends = [dead_letter(), submitted_only("r3"), cancelled("r3"), cancelled("ghost")]
    ends += operator_requests()
    return worker_events()[:2] + mixed + ends + worker_events()[2:]


def submitted_only(rollout_id: str) -> RolloutSubmitted:
    """A rollout opened and never given its trajectories (then cancelled)."""
    return RolloutSubmitted(
        event_id=derive_id(rollout_id, "submitted"),
        rollout_id=rollout_id,
        occurred_at=T0 + 2,
        policy="heddle",
        num_trajectories=1,
    )


def operator_requests() -> list[EventT]:
    """Three operator events, one naming a rollout that does not exist."""
    return [
        WorkerDrainRequested(
            event_id="w00:op:a:drain", occurred_at=T0 + 4, worker_id="w00", operator="ana"
        ),
        TrajectoryAbortRequested(
            event_id="r1:t000000:op:b:abort", rollout_id="r1", occurred_at=T0 + 4,
            traj_id="t000000", operator="ana", reason="stuck",
        ),
        TrajectoryReprioritizeRequested(
            event_id="nosuch:t000000:op:c:prio", rollout_id="nosuch", occurred_at=T0 + 5,
            traj_id="t000000", priority=1e9, pin=True,
        ),
    ]  # fmt: skip
