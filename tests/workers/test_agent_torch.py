"""The worker agent with the torch engine (tiny model, CPU): real forward passes, and a migration
that moves real KV tensors through the blob store so the target does not prefill again."""

from __future__ import annotations

from typing import Any

import pytest
from test_agent_memory import Harness, MemoryBus, kinds

from heddle.events import Completed, Generated, GenerationStarted, Migrated, MigrateOut, ToolCalled
from heddle.workers.engines import create_engine

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(180)

STEPS: list[dict[str, Any]] = [
    {"output_tokens": 12, "tool_s": 3.0, "tool_output_tokens": 5},  # wall seconds at scale 1
    {"output_tokens": 8, "tool_s": 0.2, "tool_output_tokens": 4},
    {"output_tokens": 6},
]


async def test_a_torch_trajectory_migrates_with_its_kv_cache() -> None:
    bus = MemoryBus()
    harness = Harness(bus, follow_migrations=False)
    try:
        for worker_id in ("w0", "w1"):
            await harness.add_worker(worker_id, engine=create_engine("torch", {"model": "tiny"}))
        await harness.submit("t1", "w0", STEPS)
        await harness.wait_for(
            lambda: any(isinstance(e, ToolCalled) for e in bus.events_of("t1")), timeout_s=120
        )
        harness.deliver(
            MigrateOut(command_id="m", rollout_id="r1", issued_at=0.0, worker_id="w0",
                       traj_id="t1", target_worker_id="w1", migration_id="m1")
        )  # fmt: skip
        done = await harness.wait_finished("t1")
    finally:
        await harness.close()
    events = bus.events_of("t1")
    assert isinstance(done, Completed), done
    assert [k for k in kinds(events) if k != "migrated"][-1] == "completed"
    migrated = next(e for e in events if isinstance(e, Migrated))
    assert migrated.kv_transferred and migrated.num_bytes > 0
    generated = [e for e in events if isinstance(e, Generated)]
    assert [len(e.output_token_ids) for e in generated] == [12, 8, 6]
    assert [e.worker_id for e in generated] == ["w0", "w1", "w1"]
    assert generated[1].num_recomputed_tokens == 0  # the imported KV served the whole prefix
    started = [e for e in events if isinstance(e, GenerationStarted)]
    assert generated[1].num_context_tokens == started[1].num_context_tokens + 8
    assert done.worker_history == ["w0", "w1"] and done.num_output_tokens == 26
