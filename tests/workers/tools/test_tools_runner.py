"""ToolRunner: each tool kind through the real sandbox, index and clock, and the result event."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.events import ToolCall
from heddle.events.commands import PythonTool, SearchTool, ToolRequest, TraceTool, UnitTestTool
from heddle.workers.tools.call_runner import ToolRunner, ToolRunnerConfig, result_event
from heddle.workers.tools.limits import SandboxConfig, SandboxLimits
from heddle.workers.tools.pool import SandboxPool
from heddle.workers.tools.search import CorpusCatalog
from heddle.workers.tools.trace import pseudo_token_ids


def make_call(request: ToolRequest, **fields: object) -> ToolCall:
    values: dict[str, object] = {
        "command_id": "c1",
        "rollout_id": "r1",
        "issued_at": 0.0,
        "traj_id": "t000001",
        "step": 2,
        "call_id": "k1",
        "request": request,
    }
    return ToolCall(**(values | fields))  # type: ignore[arg-type]


CAP_S = 1.0
"""The executor's cap on a call's timeout in the tests of the cap; the others leave calls room
(a loaded machine takes seconds for what takes milliseconds idle)."""


@pytest.fixture
async def runner() -> AsyncIterator[ToolRunner]:
    config = SandboxConfig(limits=SandboxLimits(timeout_s=60.0))
    async with SandboxPool(config, min_warm=1, max_procs=2) as pool:
        yield ToolRunner(pool, CorpusCatalog(), ToolRunnerConfig(max_timeout_s=60.0))


@pytest.fixture
async def capped_runner() -> AsyncIterator[ToolRunner]:
    config = SandboxConfig(limits=SandboxLimits(timeout_s=60.0))
    async with SandboxPool(config, min_warm=1, max_procs=2) as pool:
        yield ToolRunner(pool, CorpusCatalog(), ToolRunnerConfig(max_timeout_s=CAP_S))


async def test_python_call(runner: ToolRunner) -> None:
    outcome = await runner.run(make_call(PythonTool(code="print(6 * 7)")))
    assert (outcome.status, outcome.output, outcome.exit_code) == ("ok", "42\n", 0)
    assert outcome.duration_s > 0


async def test_worker_timeout_is_capped_by_the_executor(capped_runner: ToolRunner) -> None:
    call = make_call(PythonTool(code="import time; time.sleep(60)"), timeout_s=600.0)
    outcome = await capped_runner.run(call)
    assert outcome.status == "timeout"
    assert "[timeout: wall-clock limit of 1 s]" in outcome.error


async def test_unit_test_call(runner: ToolRunner) -> None:
    request = UnitTestTool(
        files={"solution.py": "def double(x):\n    return 2 * x\n"},
        test_code="from solution import double\ndef test_one():\n    assert double(2) == 4\n",
    )
    outcome = await runner.run(make_call(request))
    assert outcome.status == "ok"
    assert outcome.output.endswith("heddle-tests: passed=1 failed=0 total=1\n")


async def test_bad_file_name_is_an_error_result(runner: ToolRunner) -> None:
    request = UnitTestTool(files={"../escape.py": ""}, test_code="")
    outcome = await runner.run(make_call(request))
    assert outcome.status == "error"
    assert "invalid tool call" in outcome.error


async def test_search_call(runner: ToolRunner) -> None:
    outcome = await runner.run(make_call(SearchTool(query="capital of Australia", top_k=50)))
    assert outcome.status == "ok"
    assert outcome.output.startswith("[1] (canberra)")
    missing = await runner.run(make_call(SearchTool(query="x", corpus="/nonexistent/corpus")))
    assert missing.status == "error"
    assert "does not exist" in missing.error


async def test_trace_call_returns_seeded_pseudo_tokens(runner: ToolRunner) -> None:
    request = TraceTool(duration_s=2.0, num_output_tokens=7, seed=11)
    outcome = await runner.run(make_call(request, time_scale=1000.0))
    assert outcome.status == "ok"
    assert list(outcome.output_token_ids) == pseudo_token_ids(11, 7)


async def test_trace_call_longer_than_the_timeout(runner: ToolRunner) -> None:
    request = TraceTool(duration_s=30.0, num_output_tokens=3)
    outcome = await runner.run(make_call(request, timeout_s=0.05))
    assert outcome.status == "timeout"
    invalid = await runner.run(make_call(TraceTool(duration_s=-1.0, num_output_tokens=1)))
    assert invalid.status == "error"
    assert "duration_s" in invalid.error


async def test_a_replayed_call_beyond_the_executors_cap_lasts_its_recorded_time(
    capped_runner: ToolRunner,
) -> None:
    """The cap (1 s here) is for code; a trace tool of 1.5 wall s (3 model s at 2x) replays
    whole when the worker allows it, as the worker does (twice the scaled time, plus 1 s)."""
    request = TraceTool(duration_s=3.0, num_output_tokens=4, seed=2)
    outcome = await capped_runner.run(make_call(request, time_scale=2.0, timeout_s=4.0))
    assert outcome.status == "ok" and list(outcome.output_token_ids) == pseudo_token_ids(2, 4)
    assert outcome.duration_s >= 3.0


@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=0, max_value=300))
def test_pseudo_tokens_are_deterministic_byte_ids(seed: int, num_tokens: int) -> None:
    token_ids = pseudo_token_ids(seed, num_tokens)
    assert token_ids == pseudo_token_ids(seed, num_tokens)
    assert len(token_ids) == num_tokens
    assert all(0 <= token_id < 256 for token_id in token_ids)


async def test_result_event_id_is_derived_from_the_call(runner: ToolRunner) -> None:
    call = make_call(TraceTool(duration_s=0.0, num_output_tokens=2, seed=5))
    outcome = await runner.run(call)
    first = result_event(call, outcome, executor_id="e1", now=1.0)
    again = result_event(call, outcome, executor_id="e2", now=2.0)
    assert first.event_id == again.event_id == "k1:tool_returned"
    assert (first.tool, first.call_id, first.step) == ("trace", "k1", 2)
    assert first.output_token_ids == pseudo_token_ids(5, 2)
