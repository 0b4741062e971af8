"""Fixtures of the environment tests: a real tool runner to execute what environments request."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from heddle.events import ToolCall, ToolRequest, ToolReturned
from heddle.workers.tools.call_runner import ToolRunner, result_event
from heddle.workers.tools.limits import SandboxConfig, SandboxLimits
from heddle.workers.tools.pool import SandboxPool
from heddle.workers.tools.search import CorpusCatalog

Execute = Callable[[ToolRequest], Awaitable[ToolReturned]]


def tool_call(request: ToolRequest, step: int = 0, time_scale: float = 1000.0) -> ToolCall:
    return ToolCall(
        command_id=f"call-{step}",
        rollout_id="r1",
        issued_at=0.0,
        traj_id="t000001",
        step=step,
        call_id=f"k{step}",
        request=request,
        timeout_s=3.0,
        time_scale=time_scale,
    )


@pytest.fixture
async def execute() -> AsyncIterator[Execute]:
    """Run a tool request for real (sandbox, BM25, trace wait) and return its ToolReturned."""
    config = SandboxConfig(limits=SandboxLimits(timeout_s=10.0))
    async with SandboxPool(config, min_warm=1, max_procs=2) as pool:
        runner = ToolRunner(pool, CorpusCatalog())
        step = 0

        async def run(request: ToolRequest) -> ToolReturned:
            nonlocal step
            call = tool_call(request, step)
            step += 1
            return result_event(call, await runner.run(call), executor_id="e", now=0.0)

        yield run
