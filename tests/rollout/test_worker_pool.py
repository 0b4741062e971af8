"""Local worker pools: per-worker options, and sim engines batching as the policy's simulation."""

from __future__ import annotations

import pytest

from heddle.rollout.deployment import WorkerPool
from heddle.workers.engines.simulated import SimulatedEngine
from heddle.workers.engines.simulated_options import SimulatedEngineOptions


def test_sim_engines_batch_as_the_simulator_does_under_the_policy() -> None:
    pool = WorkerPool(2, "sim", {"time-scale": "20"}, tp_degrees=(1, 2))
    heddle = pool.for_policy("heddle")
    # sglang (the default engine model) retracts a preempted request: Heddle does not preempt
    assert heddle.options_for(1) == {"time_scale": "20", "preemptive": "false", "tp": "2"}
    assert pool.for_policy("verl").options_for(0)["preemptive"] == "false"
    assert pool.for_policy("autellix").options_for(0)["preemptive"] == "true"
    torch = WorkerPool(1, "sim", {"engine-model": "torch"}).for_policy("heddle")
    assert torch.options_for(0)["preemptive"] == "true"  # preemption keeps KV there


def test_sglang_engines_preempt_only_for_bundles_that_preempt_losing_kv() -> None:
    pool = WorkerPool(2, "sglang", {"url": "http://127.0.0.1:30000"})
    assert pool.for_policy("heddle").options_for(0)["preemptive"] == "false"
    assert pool.for_policy("autellix").options_for(1)["preemptive"] == "true"
    given = WorkerPool(1, "sglang", {"url": "http://127.0.0.1:30000", "preemptive": "true"})
    assert given.for_policy("heddle").options_for(0)["preemptive"] == "true"


def test_options_given_explicitly_win_and_real_engines_are_left_alone() -> None:
    pool = WorkerPool(1, "sim", {"preemptive": "false"})
    assert pool.for_policy("heddle").options_for(0)["preemptive"] == "false"
    torch = WorkerPool(1, "torch", {"model": "tiny"})
    assert torch.for_policy("heddle") is torch


def test_the_sim_engine_takes_the_engine_model() -> None:
    assert (
        SimulatedEngine(SimulatedEngineOptions())._model.config.cache == "radix"
    )  # sglang, the default
    engine = SimulatedEngine(SimulatedEngineOptions(engine_model="torch"))
    assert engine._model.config.cache == "trajectory" and engine.capabilities.can_export_kv
    with pytest.raises(ValueError, match="engine_model"):
        SimulatedEngineOptions(engine_model="fifo")


def test_workers_share_processes_in_runs_of_equal_options_up_to_the_limit() -> None:
    assert WorkerPool(5, "sim").process_groups() == [range(i, i + 1) for i in range(5)]
    shared = WorkerPool(5, "sim", workers_per_process=2)
    assert shared.process_groups() == [range(0, 2), range(2, 4), range(4, 5)]
    # a resource plan: workers of another TP degree never share a process with these
    planned = WorkerPool(5, "sim", tp_degrees=(1, 1, 2, 2, 1), workers_per_process=16)
    assert planned.process_groups() == [range(0, 2), range(2, 4), range(4, 5)]
    assert [len(g) for g in WorkerPool(33, "sim", workers_per_process=16).process_groups()] == [
        16, 16, 1,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="workers_per_process"):
        WorkerPool(1, "sim", workers_per_process=0)
