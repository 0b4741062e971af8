"""Run one ``ToolCall`` and describe its result as the ``ToolReturned`` event.

python and unit_tests go to the sandbox pool, search runs in-process against a BM25 index, trace
waits its scaled tool time. Every failure of the call itself becomes a status (``error``,
``timeout``, ``killed``) in the result; only a broken executor raises.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Protocol, assert_never

from heddle.events.base import ToolStatus
from heddle.events.builders import tool_returned_event
from heddle.events.commands import PythonTool, SearchTool, ToolCall, TraceTool, UnitTestTool
from heddle.events.trajectory import ToolReturned
from heddle.workers.tools.sandbox import SandboxRequest, SandboxResult
from heddle.workers.tools.search import CorpusCatalog, CorpusError, format_hits
from heddle.workers.tools.trace import run_trace_tool


class Sandbox(Protocol):
    """What the runner needs from the sandbox (``SandboxPool``)."""

    async def run(self, request: SandboxRequest) -> SandboxResult: ...


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    status: ToolStatus
    output: str = ""
    error: str = ""
    exit_code: int | None = None
    output_token_ids: tuple[int, ...] = ()
    duration_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ToolRunnerConfig:
    max_timeout_s: float = 60.0
    """Cap on a code or test call's ``timeout_s`` (wall seconds), whatever the worker asked
    (a trace call is not capped: see ``ToolRunner._trace``)."""
    max_top_k: int = 20
    """Cap on a search's ``top_k``."""
    max_chars_per_hit: int = 600
    """Characters of each search hit put in the observation."""


class ToolRunner:
    def __init__(
        self, sandbox: Sandbox, catalog: CorpusCatalog, config: ToolRunnerConfig | None = None
    ) -> None:
        self.sandbox = sandbox
        self.catalog = catalog
        self.config = config or ToolRunnerConfig()

    def timeout_s(self, call: ToolCall) -> float:
        return min(call.timeout_s, self.config.max_timeout_s)

    async def run(self, call: ToolCall) -> ToolOutcome:
        started = time.monotonic()
        try:
            outcome = await self._dispatch(call)
        except ValueError as exc:
            outcome = ToolOutcome(status="error", error=f"invalid tool call: {exc}")
        # Model seconds, like every duration in an event (a trace tool of a time-scaled run
        # waits its recorded time divided by the scale: multiplying gives the recorded time).
        return replace(outcome, duration_s=(time.monotonic() - started) * call.time_scale)

    async def _dispatch(self, call: ToolCall) -> ToolOutcome:
        match call.request:
            case PythonTool(code=code):
                request = SandboxRequest(code=code, timeout_s=self.timeout_s(call))
                return _from_sandbox(await self.sandbox.run(request))
            case UnitTestTool(files=files, test_code=test_code):
                request = SandboxRequest(
                    code=test_code, mode="unit_tests", files=files, timeout_s=self.timeout_s(call)
                )
                return _from_sandbox(await self.sandbox.run(request))
            case SearchTool():
                return await self._search(call.request)
            case TraceTool():
                return await self._trace(call.request, call)
            case _:
                assert_never(call.request)

    async def _search(self, request: SearchTool) -> ToolOutcome:
        top_k = min(max(request.top_k, 1), self.config.max_top_k)
        try:
            # Building an index of a large corpus takes a while: keep the event loop free.
            index = await asyncio.to_thread(self.catalog.index, request.corpus)
        except CorpusError as exc:
            return ToolOutcome(status="error", error=str(exc))
        hits = index.search(request.query, top_k)
        return ToolOutcome(status="ok", output=format_hits(hits, self.config.max_chars_per_hit))

    async def _trace(self, request: TraceTool, call: ToolCall) -> ToolOutcome:
        """A replayed call sleeps its recorded time (scaled) and cannot run away, so the
        executor's cap for code does not apply: only the worker's ``timeout_s``, which the
        worker sizes from that time."""
        timeout_s = call.timeout_s
        try:
            token_ids = await asyncio.wait_for(run_trace_tool(request, call.time_scale), timeout_s)
        except TimeoutError:
            return ToolOutcome(status="timeout", error=f"wall-clock limit of {timeout_s:g} s")
        return ToolOutcome(status="ok", output_token_ids=tuple(token_ids))


def _from_sandbox(result: SandboxResult) -> ToolOutcome:
    error = result.stderr
    if result.reason:
        error += f"{chr(10) if error else ''}[{result.status}: {result.reason}]"
    return ToolOutcome(
        status=result.status, output=result.stdout, error=error, exit_code=result.exit_code
    )


def tool_name(call: ToolCall) -> str:
    """The request's tag: python, unit_tests, search or trace."""
    return str(type(call.request).__struct_config__.tag)


def result_event(
    call: ToolCall, outcome: ToolOutcome, *, executor_id: str, now: float
) -> ToolReturned:
    """The call's ``ToolReturned`` (``heddle.events.builders.tool_returned_event``: its id
    derives from the call's)."""
    return tool_returned_event(
        rollout_id=call.rollout_id,
        traj_id=call.traj_id,
        step=call.step,
        call_id=call.call_id,
        tool=tool_name(call),
        status=outcome.status,
        output_token_ids=list(outcome.output_token_ids),
        duration_s=outcome.duration_s,
        executor_id=executor_id,
        now=now,
        output=outcome.output,
        error=outcome.error,
        exit_code=outcome.exit_code,
    )
