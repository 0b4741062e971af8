"""Profile-based evaluation of resource plans: simulate each worker's group on its own.

The paper derives its interference factor from a simulator of the concurrent execution of a
group of trajectories (s.5.2). Here that simulator prices whole configurations: each worker
runs its group of (historical) trajectories through a batching model with the bundle's engine
settings, each trajectory alternating generation and its tool calls; the configuration's
makespan is the slowest worker's. No control plane runs: trajectories stay where they were put
and order by a fixed priority (their length for preemptive length-first engines, submission
order otherwise). It is a model of a plan, cheap enough to compare a handful of plans (the
workers' groups add up to one rollout).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from heddle.policy.batching import BatchingConfig, BatchingModel, GenerationJob
from heddle.policy.cost.model import CostModel
from heddle.traces import TraceTrajectory


def group_makespan_s(
    group: Sequence[TraceTrajectory],
    cost: CostModel,
    engine: BatchingConfig,
    priority: Callable[[int, TraceTrajectory], float],
) -> float:
    """Seconds until every trajectory of ``group`` finishes on one worker, all started at 0.
    ``priority(index, trajectory)`` is each trajectory's fixed priority (larger first)."""
    model = BatchingModel(cost, engine)
    context = {index: t.prompt_tokens for index, t in enumerate(group)}
    steps = dict.fromkeys(range(len(group)), 0)
    # Timers: (time, sequence, index) when a tool returns and the next step is submitted.
    timers: list[tuple[float, int, int]] = [(0.0, index, index) for index in range(len(group))]
    sequence = len(group)
    makespan = 0.0
    new_tokens = {index: t.prompt_tokens for index, t in enumerate(group)}
    while timers or model.next_event_time() is not None:
        wake = model.next_event_time()
        if timers and (wake is None or timers[0][0] <= wake):
            at, _, index = heapq.heappop(timers)
            trajectory, step = group[index], steps[index]
            job = GenerationJob(
                request_id=f"{index}:{step}",
                traj_id=str(index),
                num_context_tokens=context[index],
                num_new_tokens=new_tokens[index],
                num_output_tokens=trajectory.steps[step].output_tokens,
                priority=priority(index, trajectory),
            )
            model.submit(job, at)
            continue
        assert wake is not None
        for done in model.advance(wake):
            index = int(done.traj_id)
            trajectory, step = group[index], steps[index]
            if step == len(trajectory.steps) - 1:
                model.release(done.traj_id)
                makespan = max(makespan, done.finished_at)
                continue
            observation = trajectory.steps[step].tool_output_tokens
            context[index] = done.num_context_tokens + observation
            new_tokens[index] = observation
            steps[index] = step + 1
            sequence += 1
            heapq.heappush(
                timers, (done.finished_at + trajectory.steps[step].tool_s, sequence, index)
            )
    return makespan


def simulated_plan_makespan_s(
    groups: Sequence[Sequence[TraceTrajectory]],
    tp_degrees: Sequence[int],
    cost_for_tp: Callable[[int], CostModel],
    engine: BatchingConfig,
    priority: Callable[[int, TraceTrajectory], float],
) -> float:
    """The slowest worker's group makespan (``inf`` if a trajectory never fits a worker)."""
    worst = 0.0
    for group, tp in zip(groups, tp_degrees, strict=True):
        if not group:
            continue
        cost = cost_for_tp(tp)
        if any(t.num_context_tokens > cost.max_kv_tokens for t in group):
            return float("inf")
        worst = max(worst, group_makespan_s(group, cost, engine, priority))
    return worst
