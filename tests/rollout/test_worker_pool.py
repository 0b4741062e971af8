"""Local worker pools: per-worker options, and sim engines batching as the policy's simulation."""

from __future__ import annotations

import pytest

from heddle.rollout.deployment import WorkerPool
from heddle.workers.engines.sim import SimEngine
from heddle.workers.engines.sim_options import SimEngineOptions


def test_sim_engines_batch_as_the_simulator_does_under_the_policy() -> None:
    pool = WorkerPool(2, "sim", {"time-scale": "20"}, tp_degrees=(1, 2))
    heddle = pool.for_policy("heddle")
    assert heddle.options_for(1) == {
        "time_scale": "20", "preemptive": "true", "eviction": "priority", "tp": "2",
    }  # fmt: skip
    verl = pool.for_policy("verl").options_for(0)
    assert (verl["preemptive"], verl["eviction"]) == ("false", "lru")


def test_options_given_explicitly_win_and_real_engines_are_left_alone() -> None:
    pool = WorkerPool(1, "sim", {"eviction": "lru"})
    assert pool.for_policy("heddle").options_for(0)["eviction"] == "lru"
    torch = WorkerPool(1, "torch", {"model": "tiny"})
    assert torch.for_policy("heddle") is torch


def test_the_sim_engine_takes_the_eviction_policy() -> None:
    engine = SimEngine(SimEngineOptions(eviction="priority"))
    assert engine._model.config.eviction == "priority"
    with pytest.raises(ValueError, match="eviction"):
        SimEngineOptions(eviction="fifo")  # type: ignore[arg-type]
