"""Many sim workers in one process (``heddle workers run N``, started by the local deployment),
and a live run whose clock is deliberately overloaded: the summary reports its lag and warns.

Real processes over a real nats-server: the control plane, one ``workers run`` child holding
every worker, a tool executor."""

from __future__ import annotations

import math
import time

import pytest

from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.rollout.deployment import LocalDeployment, WorkerPool
from heddle.rollout.driver import RunHooks, RunOptions, run_rollout
from heddle.rollout.slowest import LAG_WARNING_FRACTION
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.workloads import generate

pytestmark = pytest.mark.timeout(240)

NUM_WORKERS = 3
NUM_TRAJECTORIES = 12
OVERLOADED_SCALE = 5000.0
"""Model seconds per wall second far beyond what messaging keeps up with: a millisecond of
any hop is five model seconds, against tool calls and generations of a few model seconds."""

TIMESTAMPS_PER_STEP = 12
"""At most this many wall timestamps enter the tiling per step (command stored and taken, step
started, generated, tool called and returned, result stored, and their causes), each off by
at most an ulp of epoch seconds."""


async def test_workers_share_a_process_and_an_overloaded_clock_reports_lag(
    settings: Settings,
) -> None:
    trace = generate("search", NUM_TRAJECTORIES, seed=2)
    pool = WorkerPool(
        NUM_WORKERS,
        "sim",
        {"time_scale": str(OVERLOADED_SCALE), "model": "qwen3-8b"},
        heartbeat_s=0.5,
        workers_per_process=NUM_WORKERS,
    )
    options = RunOptions(
        plan=RolloutPlan("heddle", trace_specs(trace), "workload:search", OVERLOADED_SCALE),
        pool=pool,
        control_plane=ControlPlaneConfig(
            cost_model="qwen3-8b", predictor=PredictorConfig("oracle"), learn_from_ledger=False
        ),
        timeout_s=150,
        show_progress=False,
    )
    children: list[set[int]] = []

    async def on_submitted(rollout_id: str, deployment: LocalDeployment) -> None:
        children.append({child.pid for child in deployment.workers.values()})
        assert set(deployment.workers) == set(pool.worker_ids)

    result = await run_rollout(settings, options, RunHooks(on_submitted=on_submitted))
    assert len(children[0]) == 1  # every worker in one process
    summary = result.summary
    assert summary.num_completed == NUM_TRAJECTORIES and summary.num_failed == 0
    assert set(summary.workers) == set(pool.worker_ids)  # each registered and took work

    lag = summary.lag
    assert lag.slowest_behind_fraction > LAG_WARNING_FRACTION
    assert lag.warning and f"{OVERLOADED_SCALE:g}x" in lag.warning
    slow = summary.slowest
    assert slow is not None
    beyond = slow.control_s + slow.messaging_s + slow.tool_queue_s + slow.engine_lag_s
    assert beyond + slow.worker_lag_s > 0
    # The timeline is tiled: only a KV transfer overlapping a tool call is left unexplained,
    # and clock rounding: each wall timestamp (epoch seconds, a float) is exact to half an ulp,
    # and every wall second counts OVERLOADED_SCALE times.
    rounding_s = TIMESTAMPS_PER_STEP * slow.num_steps * math.ulp(time.time()) * OVERLOADED_SCALE
    assert abs(slow.other_s) <= slow.migration_s + rounding_s, repr(slow)
